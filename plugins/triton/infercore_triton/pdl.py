"""Programmatic dependent launches (PDL, sm_90 and later).

A kernel launched as a programmatic dependent of the kernel before it on the stream (``launch_pdl=True``) may
start while that kernel is still running, once each of its programs has signalled
(``tl.extra.cuda.gdc_launch_dependents()``) or exited. Until it calls ``tl.extra.cuda.gdc_wait()`` it must read
nothing the kernel before writes and write nothing at all; after the wait, everything that kernel wrote is
visible. So a dependent can load what does not depend on the step (a weight) while the kernel before finishes,
and the launch's own latency hides behind that kernel. Every program of a dependent must reach the wait: a
kernel launched after it, normally, then runs after both. Inside a CUDA graph the dependency is captured as a
programmatic edge.

``INFERCORE_PDL=1`` turns it on for the decode step's skinny GEMMs (with the decode attention kernel in front
signalling early). It stays off by default: on an H100 it did not beat the default launches (1.189 against
1.163 ms per token on the 0.6B shape). A LoRA kernel's launch table chooses it per shape.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

#: ``INFERCORE_PDL=1``: the skinny GEMM launches as a programmatic dependent and decode attention signals early.
PDL_ENV = "INFERCORE_PDL"


@functools.cache
def pdl_supported(device: torch.device) -> bool:
    """Programmatic dependent launches run on CUDA devices of sm_90 and later (not in Triton's interpreter)."""
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    return torch.cuda.get_device_capability(device)[0] >= 9


def pdl_enabled(device: torch.device) -> bool:
    """Whether the decode step's kernels launch as programmatic dependents on ``device`` (``INFERCORE_PDL=1``)."""
    return os.environ.get(PDL_ENV) == "1" and pdl_supported(device)


def launch_options(pdl: bool) -> dict[str, Any]:
    """Triton launch keywords for a kernel launched as a programmatic dependent (none otherwise)."""
    return {"launch_pdl": True} if pdl else {}
