"""The mark every GPU test carries: ``gpu``, skipped with a reason where it cannot run."""

import os

import pytest
import torch

_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

requires_gpu = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA/ROCm GPU"),
    pytest.mark.skipif(_INTERPRETED, reason="TRITON_INTERPRET=1 is set (tests/triton sets it); run tests/gpu "
                       "in a pytest process of its own"),
]
