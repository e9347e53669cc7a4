"""Every speculative-decoding test starts from the same global RNG state."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _fixed_seed() -> None:
    torch.manual_seed(1234)
