"""The prefill kernel's compile-time constants depend on the model and cache, never on the step."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from triton_cases import make_case

import infercore_triton.prefill_attention as prefill


class _RecordingKernel:
    """Stands in for the jitted kernel: records the keyword arguments of each launch."""

    def __init__(self) -> None:
        self.launches: list[dict[str, Any]] = []

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **kwargs: Any) -> None:
            self.launches.append(kwargs)
        return launch


def test_constexprs_do_not_follow_the_query_length(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step whose longest prefill run is short must reuse the variant start-up built for long runs."""
    kernel = _RecordingKernel()
    monkeypatch.setattr(prefill, "_prefill_kernel", kernel)
    for query_len in (2, 9, 17, 33, 200):
        case = make_case([query_len + 5], [query_len], 2, 1, 64, 16, torch.float32, seed=query_len)
        out = torch.empty_like(case.q)
        prefill.prefill_attention(case.q, case.kv_cache, case.query_start_loc, case.seq_lens, case.block_table,
                                  0.125, out, case.max_query_len)
    assert len(kernel.launches) == 5
    assert all(launch == kernel.launches[0] for launch in kernel.launches)
