"""Attention of a step padded for a whole-step graph: launches sized by the padded token and request
counts alone, each program finding its request on the device (through the interpreter)."""

from __future__ import annotations

import pytest
import torch
from triton_cases import TOLERANCE, make_case, reference_attention, rel_err

from infercore_triton.decode_attention import DecodeConfig, decode_attention
from infercore_triton.kv_cache_write import write_kv
from infercore_triton.prefill_attention import PrefillConfig, prefill_attention

#: Decodes before, between and after prompts; a one-token chunk of a prompt after its prefix; a chunk
#: after a cached prefix; a fresh prompt longer than one program's query tokens.
SEQ_LENS = [40, 9, 77, 30, 21, 5, 64]
QUERY_LENS = [1, 9, 20, 1, 1, 5, 37]


def _count_launches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the split kernels ``decode_attention`` launches from now on."""
    from infercore_triton import decode_attention as decode_module
    from infercore_triton import verify_attention as verify_module

    launched: list[str] = []
    for module, name in ((decode_module, "_decode_split_kernel"), (verify_module, "_verify_split_kernel")):
        kernel = getattr(module, name)

        class _Counted:
            def __init__(self, kernel=kernel, name=name) -> None:  # noqa: ANN001
                self.kernel, self.name = kernel, name

            def __getitem__(self, grid):  # noqa: ANN001, ANN204
                launched.append(self.name)
                return self.kernel[grid]

        monkeypatch.setattr(module, name, _Counted())
    return launched


def _padded(case, extra_tokens: int, extra_reqs: int):  # noqa: ANN001, ANN202
    """The case's inputs as the runner pads them: tokens with no request, requests with no tokens."""
    total, n = case.q.shape[0], case.seq_lens.shape[0]
    q = torch.cat([case.q, torch.randn((extra_tokens, *case.q.shape[1:])).to(case.q.dtype)])
    qsl = torch.cat([case.query_start_loc, torch.full((extra_reqs,), total, dtype=torch.int32)])
    seq_lens = torch.cat([case.seq_lens, torch.zeros(extra_reqs, dtype=torch.int32)])
    table = torch.cat([case.block_table, torch.zeros((extra_reqs, case.block_table.shape[1]), dtype=torch.int32)])
    assert qsl.shape[0] == n + extra_reqs + 1
    return q, qsl, seq_lens, table


@pytest.mark.parametrize(("config", "window", "dtype"), [
    (PrefillConfig(block_m=32, block_n=16, pack_heads=False), None, torch.float32),
    (PrefillConfig(block_m=64, block_n=16, m_blocks_inner=False), 24, torch.float32),
    (PrefillConfig(block_m=128, block_n=32, num_warps=8, m_blocks_inner=False), None, torch.bfloat16),
], ids=["m32-nopack", "m64-window", "m128-bf16"])
def test_uniform_launches_match_the_reference(config: PrefillConfig, window: int | None, dtype: torch.dtype) -> None:
    group, kv_heads, head = 2, 2, 64
    case = make_case(SEQ_LENS, QUERY_LENS, group * kv_heads, kv_heads, head, 16, dtype, seed=7)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    q, qsl, seq_lens, table = _padded(case, extra_tokens=10, extra_reqs=9)
    out = torch.full_like(q, float("nan"))
    scale = head**-0.5
    decode_attention(q, case.kv_cache, seq_lens, table, scale, out, sliding_window=window, config=DecodeConfig(),
                     query_start_loc=qsl)
    # max_query_len is ignored by a uniform launch: pass one that would size an eager grid too small.
    prefill_attention(q, case.kv_cache, qsl, seq_lens, table, scale, out, 1, sliding_window=window, config=config,
                      uniform_grid=True)
    total = case.q.shape[0]
    want = reference_attention(case, scale, sliding_window=window)
    assert rel_err(out[:total], want) < TOLERANCE[dtype]
    assert torch.isnan(out[total:]).all()  # padding tokens belong to no request: never written


def test_decodes_through_query_starts_leave_other_rows_alone() -> None:
    case = make_case(SEQ_LENS, QUERY_LENS, 4, 2, 64, 16, torch.float32, seed=3)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    out = torch.full_like(case.q, float("nan"))
    decode_attention(case.q, case.kv_cache, case.seq_lens, case.block_table, 0.125, out,
                     query_start_loc=case.query_start_loc)
    want = reference_attention(case, 0.125)
    decode_rows = case.query_start_loc[:-1][torch.tensor(QUERY_LENS) == 1]
    assert rel_err(out[decode_rows], want[decode_rows]) < TOLERANCE[torch.float32]
    others = torch.ones(out.shape[0], dtype=torch.bool)
    others[decode_rows] = False
    assert torch.isnan(out[others]).all()


@pytest.mark.parametrize(("num_splits", "runtime_splits", "merge", "window"), [
    (3, True, "fused", None), (5, True, "launch", None), (4, False, "fused", 24), (2, False, "launch", None)])
def test_decodes_through_query_starts_split_their_contexts(monkeypatch: pytest.MonkeyPatch, num_splits: int,
                                                           runtime_splits: bool, merge: str,
                                                           window: int | None) -> None:
    """Decodes found on the device among padded requests (a whole mixed graph's) split their contexts: the
    splits merged by the last to finish or by a launch of their own, each decode's output at its query's row
    and nothing else written."""
    from infercore_triton.decode_attention import REDUCE_ENV

    monkeypatch.setenv(REDUCE_ENV, merge)
    case = make_case(SEQ_LENS, QUERY_LENS, 4, 2, 64, 16, torch.float32, seed=5)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    q, qsl, seq_lens, table = _padded(case, extra_tokens=6, extra_reqs=5)
    out = torch.full_like(q, float("nan"))
    decode_attention(q, case.kv_cache, seq_lens, table, 0.125, out, num_splits=num_splits, sliding_window=window,
                     config=DecodeConfig(block_n=16), query_start_loc=qsl, runtime_splits=runtime_splits)
    want = reference_attention(case, 0.125, sliding_window=window)
    decode_rows = case.query_start_loc[:-1][torch.tensor(QUERY_LENS) == 1]
    assert rel_err(out[decode_rows], want[decode_rows]) < TOLERANCE[torch.float32]
    others = torch.ones(out.shape[0], dtype=torch.bool)
    others[decode_rows] = False
    assert torch.isnan(out[others]).all()


#: A speculating batch: rows verifying 1 + k tokens (k = 3, fewer near a row's end) beside a prompt chunk.
SPEC_SEQ_LENS = [40, 9, 77, 30, 21, 64]
SPEC_QUERY_LENS = [4, 9, 4, 1, 2, 37]


@pytest.mark.parametrize("shared_kv", [False, True])
@pytest.mark.parametrize(("num_splits", "window"), [(1, None), (3, None), (2, 24)])
def test_short_queries_attend_as_decodes_of_their_tokens(num_splits: int, window: int | None, shared_kv: bool,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Per query token (the decode kernel's short path, ``INFERCORE_VERIFY_SHARED_KV=0``) or per sequence, all
    its tokens on one read of the context (``verify_attention``, the default): the same attention."""
    monkeypatch.setenv("INFERCORE_VERIFY_SHARED_KV", "1" if shared_kv else "0")
    launched = _count_launches(monkeypatch)
    group, kv_heads, head = 2, 2, 64
    case = make_case(SPEC_SEQ_LENS, SPEC_QUERY_LENS, group * kv_heads, kv_heads, head, 16, torch.float32, seed=11)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    q, qsl, seq_lens, table = _padded(case, extra_tokens=6, extra_reqs=4)
    out = torch.full_like(q, float("nan"))
    scale = head**-0.5
    decode_attention(q, case.kv_cache, seq_lens, table, scale, out, num_splits=num_splits, sliding_window=window,
                     query_start_loc=qsl, short_queries=4)
    assert launched == (["_verify_split_kernel"] if shared_kv else ["_decode_split_kernel"])
    total = case.q.shape[0]
    want = reference_attention(case, scale, sliding_window=window)
    lens = torch.tensor(SPEC_QUERY_LENS)
    short = torch.repeat_interleave(lens <= 4, lens)
    assert rel_err(out[:total][short], want[short]) < TOLERANCE[torch.float32]
    assert torch.isnan(out[:total][~short]).all() and torch.isnan(out[total:]).all()  # not the decode kernel's rows
    prefill_attention(q, case.kv_cache, qsl, seq_lens, table, scale, out, 1, sliding_window=window,
                      config=PrefillConfig(block_m=32, block_n=16), uniform_grid=True, short_queries=4)
    assert rel_err(out[:total], want) < TOLERANCE[torch.float32]
    assert torch.isnan(out[total:]).all()


@pytest.mark.parametrize(("short", "dtype", "num_splits"), [(4, torch.bfloat16, 1), (6, torch.bfloat16, 4),
                                                           (6, torch.float32, 2)])
def test_shared_kv_verification_with_wider_groups(short: int, dtype: torch.dtype, num_splits: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A group of 4 query heads: 4 tokens fill the 16 rows exactly, 6 (k = 5) take 32; queries of 1 to
    ``short`` tokens beside a longer one (left to the prefill kernel)."""
    monkeypatch.setenv("INFERCORE_VERIFY_SHARED_KV", "1")
    launched = _count_launches(monkeypatch)
    group, kv_heads, head = 4, 2, 64
    query_lens = [short, 1, 3, 12, short, 2]
    seq_lens = [50, 7, 90, 40, short, 130]
    case = make_case(seq_lens, query_lens, group * kv_heads, kv_heads, head, 16, dtype, seed=5)
    write_kv(case.k, case.v, case.kv_cache, case.slot_mapping)
    q, qsl, lens, table = _padded(case, extra_tokens=3, extra_reqs=2)
    out = torch.full_like(q, float("nan"))
    scale = head**-0.5
    decode_attention(q, case.kv_cache, lens, table, scale, out, num_splits=num_splits, query_start_loc=qsl,
                     short_queries=short)
    assert launched == ["_verify_split_kernel"]
    total = case.q.shape[0]
    want = reference_attention(case, scale)
    counts = torch.tensor(query_lens)
    mine = torch.repeat_interleave(counts <= short, counts)
    assert rel_err(out[:total][mine], want[mine]) < TOLERANCE[dtype]
    assert torch.isnan(out[:total][~mine]).all()
