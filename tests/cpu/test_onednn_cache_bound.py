"""oneDNN's shape caches are bounded: a linear called at many token counts does not grow the process
without end (each cached shape cost ~0.6 MB; an engine serving mixed steps grew by hundreds of MB)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from infercore_cpu.linear import _ONEDNN

SCRIPT = """
import psutil, torch
from infercore_cpu.linear import bound_onednn_caches, linear
bound_onednn_caches(64)
torch.set_num_threads(1)
w = torch.randn(256, 256)
proc, rss = psutil.Process(), []
for m in range(1, 301):
    linear(torch.randn(m, 256), w)
    if m in (100, 300):
        rss.append(proc.memory_info().rss)
print((rss[1] - rss[0]) / 2**20)
"""


@pytest.mark.skipif(not _ONEDNN, reason="this CPU has no AVX2/AVX-512 oneDNN linear")
def test_two_hundred_new_shapes_cost_little_memory() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True)
    growth_mib = float(out.stdout.strip().splitlines()[-1])
    # Unbounded (the default 1,024 entries) this grows by ~130 MiB; bounded at 64 entries, a few MiB.
    assert growth_mib < 40, growth_mib


def test_row_buckets_are_few_and_pad_little() -> None:
    from infercore_cpu.linear import row_bucket

    sizes = {row_bucket(rows) for rows in range(1, 4097)}
    assert len(sizes) < 70
    assert all(row_bucket(rows) >= rows for rows in range(1, 4097))
    assert all(row_bucket(rows) / rows < 1.13 for rows in range(257, 4097))


@pytest.mark.skipif(not _ONEDNN, reason="this CPU has no AVX2/AVX-512 oneDNN linear")
@pytest.mark.parametrize("shape", [(17, 64), (3, 100, 64), (257, 64)])
def test_padded_rows_give_the_same_product(shape: tuple[int, ...]) -> None:
    import torch
    import torch.nn.functional as F

    from infercore_cpu.linear import linear

    gen = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(*shape, generator=gen), torch.randn(48, 64, generator=gen), torch.randn(48, generator=gen)
    out = linear(x, w, b)
    assert out.shape == (*shape[:-1], 48)
    torch.testing.assert_close(out, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
