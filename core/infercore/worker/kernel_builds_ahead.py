"""Start-up's passes run once ahead of themselves, inside the platform's
:meth:`~infercore.platforms.interface.Platform.kernel_builds_ahead`: their kernels build side by side and nothing
is computed, so that running them for real finds every kernel built. By default only where no earlier start-up of
the same configuration built them (:func:`start_up_key`, :func:`infercore.platforms.kernel_builds.built_before`)."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from infercore.platforms import kernel_builds
from infercore.startup_timeline import startup_phase

if TYPE_CHECKING:
    from infercore.worker.model_runner import ModelRunner

logger = logging.getLogger(__name__)

#: Settings that never change which kernels a start-up pass launches (where the model comes from, how it is served).
_NOT_IN_KEY = {"serve": True, "load": True,
               "model": {"model", "tokenizer", "revision", "served_model_name", "seed", "skip_tokenizer_init"}}


def _device_name(device: torch.device) -> str:
    """The device's model name where torch's module for it tells one (``cuda``, ``xpu``), else its type."""
    get = getattr(getattr(torch, device.type, None), "get_device_name", None)
    try:
        return str(get(device)) if get is not None else device.type
    except Exception:  # noqa: BLE001 - a backend without the query: the type still separates the caches' users
        return device.type


def start_up_key(runner: ModelRunner, name: str) -> str:
    """A digest of what decides the kernels start-up pass ``name`` builds: the engine's settings (less where the model
    comes from and how it is served), the model's shape, the device and the versions of torch, Triton and infercore."""
    import triton

    from infercore.version import __version__

    shape = {k: v for k, v in runner.hf_config.to_dict().items() if k not in ("_name_or_path", "transformers_version")}
    settings = runner.config.model_dump(exclude=_NOT_IN_KEY)
    parts = [name, json.dumps(settings, sort_keys=True, default=str), json.dumps(shape, sort_keys=True, default=str),
             _device_name(runner.device), torch.__version__, triton.__version__, __version__]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def build_kernels_ahead(runner: ModelRunner, name: str, passes: Callable[[], None]) -> None:
    """Run ``passes`` (start-up pass ``name``) once inside the runner's platform's ``kernel_builds_ahead`` (nothing
    where it offers none, or where the environment leaves the choice to :func:`start_up_key`'s marker and an earlier
    start-up left it). A failure there costs only the builds it did not reach: those happen when the passes first
    run, as without it. One device only: with tensor or pipeline parallelism the passes hold collectives
    (unmeasured there)."""
    parallel = runner.config.parallel
    if parallel.tensor_parallel_size * parallel.pipeline_parallel_size > 1:
        return
    ahead = runner.platform.kernel_builds_ahead()
    if ahead is None:
        return
    key = start_up_key(runner, name) if kernel_builds.requested() is None else None
    if key is not None and kernel_builds.built_before(key):
        logger.debug("%s: kernels built ahead by an earlier start-up (marker %s)", name, key)
        return
    with startup_phase("kernel builds ahead"):
        try:
            with ahead, kernel_builds.ahead_pass():
                passes()
        except Exception as exc:
            logger.info("building kernels ahead stopped early (%s: %s); the rest build when first run",
                        type(exc).__name__, exc)
            logger.debug("where building kernels ahead stopped", exc_info=exc)
        else:
            if key is not None:
                kernel_builds.mark_built(key)
        try:
            runner.platform.synchronize()
        except Exception as exc:  # a device error the pass left behind (sticky on CUDA): no later step can run
            raise RuntimeError(
                f"building kernels ahead ({name}) left the device unusable ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}); start again with {kernel_builds.BUILD_AHEAD_ENV}=0 "
                "(each kernel then builds when first run), and please report it") from exc
        runner.platform.empty_cache()
