"""The prefill kernel's per-token visibility bounds (Gemma 3's image spans, seen whole by their own tokens)
against core's reference, through the interpreter: spans at a query's start, middle and end, after a cached
prefix, under a sliding window, across key tiles, and on the uniform (whole-graph) grid."""

from __future__ import annotations

import pytest
import torch
from triton_cases import TOLERANCE, make_case, rel_err

from infercore.attention.reference import paged_attention, write_kv
from infercore_triton.kv_cache_write import write_kv as triton_write_kv
from infercore_triton.prefill_attention import PrefillConfig, prefill_attention

SEQ_LENS = [40, 50, 9, 70]
QUERY_LENS = [40, 12, 1, 60]
#: (request, first position, end position) of the image spans, inside each request's query.
SPANS = [(0, 2, 19), (0, 20, 39), (1, 40, 50), (3, 12, 45)]


def _bounds() -> torch.Tensor:
    out = []
    for i, (seq_len, q_len) in enumerate(zip(SEQ_LENS, QUERY_LENS, strict=True)):
        own = torch.arange(seq_len - q_len, seq_len, dtype=torch.int32)
        for req, first, end in SPANS:
            if req == i:
                own[first - (seq_len - q_len): end - (seq_len - q_len)] = end - 1
        out.append(own)
    return torch.cat(out)


@pytest.mark.parametrize(("config", "window", "uniform"), [
    (PrefillConfig(block_m=32, block_n=16, pack_heads=False), None, False),
    (PrefillConfig(block_m=64, block_n=16, m_blocks_inner=False), 7, False),
    (PrefillConfig(block_m=32, block_n=16), None, True),
], ids=["causal", "sliding-window", "uniform-grid"])
def test_visible_bounds_match_the_reference(config: PrefillConfig, window: int | None, uniform: bool) -> None:
    case = make_case(SEQ_LENS, QUERY_LENS, 4, 2, 32, 16, torch.float32, seed=3)
    bounds = _bounds()
    ref_cache = case.kv_cache.double().clone()
    write_kv(case.k.double(), case.v.double(), ref_cache, case.slot_mapping)
    expected = paged_attention(case.q.double(), ref_cache, case.query_start_loc, case.seq_lens, case.block_table,
                               32**-0.5, torch.zeros(case.q.shape, dtype=torch.float64), window,
                               visible_until=bounds)
    triton_write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    out = torch.full_like(case.q, float("nan"))
    if uniform:  # one-token queries are the decode kernel's there: compare the prefill rows only
        out[52:53] = 0.0
        expected[52:53] = 0.0
    prefill_attention(case.q, case.kv_cache, case.query_start_loc, case.seq_lens, case.block_table, 32**-0.5, out,
                      case.max_query_len, sliding_window=window, config=config, uniform_grid=uniform,
                      visible_until=bounds)
    assert rel_err(out, expected) < TOLERANCE[torch.float32]
    # The bounds change the answer (the test is not vacuous): causal attention differs on span rows.
    causal = paged_attention(case.q.double(), ref_cache, case.query_start_loc, case.seq_lens, case.block_table,
                             32**-0.5, torch.zeros(case.q.shape, dtype=torch.float64), window)
    assert rel_err(causal[:40], expected[:40]) > 1e-2
