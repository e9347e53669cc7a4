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
