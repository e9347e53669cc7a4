"""Attention conformance cases: random ragged steps over a paged cache, and the reference's answer.

Each case is a named step (requests of ``(seq_len, query_len)``, optional sliding window, ALiBi, cache
blocks shared between requests, an fp8 cache); :func:`run_case` runs a backend on it and returns the error
against the torch reference, so a failure names the case and says by how much it is off.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import torch

from infercore.attention.backend import AttentionBackend, AttentionRequest, CommonAttentionMetadata
from infercore.attention.encoder_only import DECODER, ENCODER_ONLY
from infercore.attention.reference import attend, paged_attention, write_kv
from infercore.attention.spec import AttentionLayerSpec
from infercore.kv_cache.fp8 import FP8_KV_DTYPE
from infercore.kv_cache.spec import KVCacheSpec
from infercore.layers.alibi import alibi_slopes

BLOCK, HEADS, KV_HEADS, HEAD = 16, 4, 2, 32


@dataclass(frozen=True)
class AttentionCase:
    """One step: ``requests`` are ``(seq_len, query_len)``; ``share`` maps a request to another whose
    first blocks it reuses (a prefix hit on blocks written in this same step)."""

    name: str
    requests: tuple[tuple[int, int], ...]
    sliding_window: int | None = None
    alibi: bool = False
    share: dict[int, tuple[int, int]] = field(default_factory=dict)  # request -> (source request, blocks)
    #: Pad the step as a captured graph would: extra slots of -1 and longer host length tensors.
    padded: bool = False
    #: Pad it as a whole-step graph of a step with prompt tokens would (for backends that set
    #: ``captures_mixed_steps``): padding tokens, and query-less padding requests the launch counts too.
    whole_graph: bool = False
    #: An fp8 (e4m3) cache with these per-tensor scales instead of a cache in the activation dtype.
    fp8_scales: tuple[float, float] | None = None
    #: Encoder-only layers (bidirectional within each request, no KV cache; ``seq_len == query_len``): the
    #: backend must attend over the step's own k/v and leave the cache untouched.
    encoder_only: bool = False
    #: Image spans whose query tokens see the whole span (``visible_until``, for backends that set
    #: ``supports_visible_bounds``): ``(request, first position, end position)``, inside the request's query.
    spans: tuple[tuple[int, int, int], ...] = ()

    def kv_cache_dtype(self, dtype: torch.dtype) -> torch.dtype:
        """The cache dtype of this case when activations are ``dtype``."""
        return FP8_KV_DTYPE if self.fp8_scales is not None else dtype

    @property
    def scales(self) -> tuple[float, float]:
        """``(k_scale, v_scale)`` of the case's cache (1.0 unless fp8)."""
        return self.fp8_scales or (1.0, 1.0)


CASES: tuple[AttentionCase, ...] = (
    AttentionCase("fresh prefills", ((5, 5), (17, 17), (33, 33), (1, 1))),
    AttentionCase("pure decode", ((1, 1), (16, 1), (17, 1), (70, 1), (33, 1))),
    AttentionCase("prefix blocks", ((20, 4), (40, 24), (16, 15), (33, 2))),
    AttentionCase("chunked prompt", ((48, 16), (64, 16), (30, 1), (80, 32))),
    AttentionCase("mixed, decodes not first", ((30, 30), (17, 1), (40, 8), (5, 1), (64, 1))),
    # Request 0 reuses the two blocks request 1 fills in this very step: every K/V of the step must be
    # written before any attention reads the cache.
    AttentionCase("same-step prefix sharing", ((40, 8), (32, 32)), share={0: (1, 2)}),
    AttentionCase("sliding window", ((30, 30), (17, 1), (40, 8), (70, 1), (48, 16)), sliding_window=7),
    AttentionCase("alibi", ((30, 30), (17, 1), (40, 8), (33, 2)), alibi=True),
    AttentionCase("graph padding", ((16, 1), (17, 1), (70, 1)), padded=True),
)

#: Cases run for backends that set ``captures_mixed_steps``: a mixed step padded as its whole-step graph
#: pads it (decodes among the prompts, so the backend must find them itself).
WHOLE_GRAPH_CASES: tuple[AttentionCase, ...] = (
    AttentionCase("whole-step graph padding", ((30, 30), (17, 1), (40, 8), (5, 1), (64, 1), (48, 16)),
                  whole_graph=True),
)

#: Encoder-only (bidirectional, cache-less) cases, run for backends that set ``supports_encoder_only``.
ENCODER_ONLY_CASES: tuple[AttentionCase, ...] = (
    AttentionCase("encoder-only sequences", ((5, 5), (17, 17), (70, 70), (1, 1), (33, 33)), encoder_only=True),
    AttentionCase("encoder-only, padded host lengths", ((12, 12), (40, 40)), encoder_only=True, padded=True),
)

#: Visibility-bound cases (image spans seen whole; Gemma 3), run for backends that set
#: ``supports_visible_bounds``: spans at a query's start, middle and end, over cached prefixes and windows.
VISIBLE_BOUNDS_CASES: tuple[AttentionCase, ...] = (
    AttentionCase("visible bounds", ((30, 30), (17, 1), (64, 40), (5, 1), (40, 8)),
                  spans=((0, 3, 20), (0, 22, 30), (2, 24, 60), (4, 32, 40))),
    AttentionCase("visible bounds, sliding window", ((70, 70), (48, 16)), sliding_window=7,
                  spans=((0, 10, 50), (1, 33, 48))),
    AttentionCase("visible bounds, whole graph", ((30, 30), (17, 1), (48, 16)), whole_graph=True,
                  spans=((0, 2, 29), (2, 40, 47))),
)

#: Cases over an fp8 cache, run for backends whose ``validate`` accepts one. K/V are N(0, 1): the
#: second case's K scale saturates every |k| above 0.9 at 448, which backend and reference must share.
FP8_CASES: tuple[AttentionCase, ...] = (
    AttentionCase("fp8 cache, mixed step", ((30, 30), (17, 1), (40, 8), (70, 1), (33, 2)), fp8_scales=(0.5, 2.0)),
    AttentionCase("fp8 cache, saturating scale, prefix sharing", ((40, 8), (32, 32), (48, 1)),
                  share={0: (1, 2)}, fp8_scales=(0.002, 1.0)),
    AttentionCase("fp8 cache, sliding window", ((30, 30), (70, 1), (48, 16)), sliding_window=7,
                  fp8_scales=(1.0, 1.0)),
)


@dataclass
class CaseResult:
    """How far a backend's output and cache writes are from the reference's."""

    output_error: float
    cache_error: float


def _blocks(n: int) -> int:
    return -(-n // BLOCK)


def _slots(row: list[int], seq_len: int) -> torch.Tensor:
    """Flat cache slots of positions ``0..seq_len-1`` of a request with block-table row ``row``."""
    return torch.tensor([row[p // BLOCK] * BLOCK + p % BLOCK for p in range(seq_len)], dtype=torch.long)


def build_step(case: AttentionCase, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """q, k, v of the step, the cache before it (cached prefixes written) and the common metadata."""
    gen = torch.Generator().manual_seed(seed)
    num_blocks = 1 + sum(_blocks(s) for s, _ in case.requests)
    free = list(range(1, num_blocks))  # block 0 is the null block
    random.Random(seed).shuffle(free)
    cache = torch.randn(2, num_blocks, BLOCK, KV_HEADS, HEAD, generator=gen).to(case.kv_cache_dtype(dtype))
    rows: list[list[int]] = [[] for _ in case.requests]
    order = sorted(range(len(case.requests)), key=lambda i: i in case.share)  # sources first
    for i in order:
        seq_len = case.requests[i][0]
        shared = []
        if i in case.share:
            src, count = case.share[i]
            shared = rows[src][:count]
        rows[i] = shared + [free.pop() for _ in range(_blocks(seq_len) - len(shared))]
    width = max(len(r) for r in rows) + 1
    table = torch.zeros(len(case.requests), width, dtype=torch.int32)
    context: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for i in order:
        seq_len, query_len = case.requests[i]
        table[i, : len(rows[i])] = torch.tensor(rows[i], dtype=torch.int32)
        k = torch.randn(seq_len, KV_HEADS, HEAD, generator=gen).to(dtype)
        v = torch.randn(seq_len, KV_HEADS, HEAD, generator=gen).to(dtype)
        first_cached = 0
        if i in case.share:
            # The shared positions hold what the source request writes in this step, not yet cached.
            src, count = case.share[i]
            first_cached = count * BLOCK
            k[:first_cached], v[:first_cached] = context[src][0][:first_cached], context[src][1][:first_cached]
        cached = seq_len - query_len
        req_slots = _slots(rows[i], seq_len)
        write_kv(k[first_cached:cached], v[first_cached:cached], cache, req_slots[first_cached:cached],
                 *case.scales)
        context[i] = (k, v)
    qs, ks, vs, slots, starts = [], [], [], [], [0]
    for i, (seq_len, query_len) in enumerate(case.requests):
        k, v = context[i]
        cached = seq_len - query_len
        qs.append(torch.randn(query_len, HEADS, HEAD, generator=gen).to(dtype))
        ks.append(k[cached:])
        vs.append(v[cached:])
        slots.append(_slots(rows[i], seq_len)[cached:])
        starts.append(starts[-1] + query_len)
    return _assemble(case, qs, ks, vs, slots, starts, table, cache, device)


def _assemble(case, qs, ks, vs, slots, starts, table, cache, device):
    n = len(case.requests)
    num_tokens = starts[-1]
    slot_mapping = torch.cat(slots).long()
    qsl = torch.tensor(starts, dtype=torch.int32)
    lens = torch.tensor([s for s, _ in case.requests], dtype=torch.int32)
    qsl_cpu, lens_cpu = qsl, lens
    if case.padded:
        slot_mapping = torch.cat([slot_mapping, torch.full((3,), -1, dtype=torch.long)])
        qsl_cpu = torch.cat([qsl, torch.full((4,), num_tokens, dtype=torch.int32)])
        lens_cpu = torch.cat([lens, torch.zeros(4, dtype=torch.int32)])
    q, k, v = torch.cat(qs), torch.cat(ks), torch.cat(vs)
    visible = _visible_until(case, starts) if case.spans else None
    if case.padded or case.whole_graph:
        q, k, v = (torch.cat([t, torch.zeros(3, *t.shape[1:], dtype=t.dtype)]) for t in (q, k, v))
    num_reqs = n
    if case.whole_graph:
        # Three padding tokens (slot -1) and five query-less requests, in the device tensors too.
        slot_mapping = torch.cat([slot_mapping, torch.full((3,), -1, dtype=torch.long)])
        qsl = qsl_cpu = torch.cat([qsl, torch.full((5,), num_tokens, dtype=torch.int32)])
        lens = lens_cpu = torch.cat([lens, torch.zeros(5, dtype=torch.int32)])
        table = torch.cat([table, torch.zeros((5, table.shape[1]), dtype=torch.int32)])
        num_reqs = n + 5
    common = CommonAttentionMetadata(
        num_reqs=num_reqs, num_actual_tokens=num_tokens, max_query_len=max(ql for _, ql in case.requests),
        max_seq_len=int(lens.max()), query_start_loc=qsl.to(device), seq_lens=lens.to(device),
        block_table=table.to(device), slot_mapping=slot_mapping.to(device), query_start_loc_cpu=qsl_cpu,
        seq_lens_cpu=lens_cpu, padded_for_graph=case.whole_graph)
    if visible is not None:
        visible = torch.cat([visible, torch.zeros(len(slot_mapping) - num_tokens, dtype=torch.int32)])
        common.visible_until, common.visible_until_cpu = visible.to(device), visible
    return q.to(device), k.to(device), v.to(device), cache.to(device), common


def _visible_until(case: AttentionCase, starts: list[int]) -> torch.Tensor:
    """Each query token's last visible position: its own, or its span's last."""
    bounds = []
    for i, (seq_len, query_len) in enumerate(case.requests):
        bounds.append(torch.arange(seq_len - query_len, seq_len, dtype=torch.int32))
        for req, first, end in case.spans:
            if req == i:
                assert seq_len - query_len <= first < end <= seq_len, f"span {first}..{end} outside request {i}'s query"
                bounds[-1][first - (seq_len - query_len): end - (seq_len - query_len)] = end - 1
    assert sum(len(b) for b in bounds) == starts[-1]
    return torch.cat(bounds)


def layer_spec(case: AttentionCase, dtype: torch.dtype) -> AttentionLayerSpec:
    """The layer spec a case's backend impl is built with."""
    return AttentionLayerSpec(num_heads=HEADS, head_size=HEAD, num_kv_heads=KV_HEADS, scale=HEAD**-0.5,
                              sliding_window=case.sliding_window,
                              alibi_slopes=alibi_slopes(HEADS) if case.alibi else None, dtype=dtype,
                              kv_cache_dtype=case.kv_cache_dtype(dtype), k_scale=case.scales[0],
                              v_scale=case.scales[1], attn_type=ENCODER_ONLY if case.encoder_only else DECODER)


def attention_request(case: AttentionCase, dtype: torch.dtype, device_type: str) -> AttentionRequest:
    """What the case asks of a backend (for its ``validate``)."""
    return AttentionRequest(num_heads=HEADS, num_kv_heads=KV_HEADS, head_size=HEAD, dtype=dtype,
                            kv_cache_dtype=case.kv_cache_dtype(dtype), block_size=BLOCK, device_type=device_type,
                            sliding_window=case.sliding_window, alibi=case.alibi, encoder_only=case.encoder_only,
                            visible_bounds=bool(case.spans))


def default_layout(backend: type[AttentionBackend]) -> bool:
    """Whether the backend keeps the default cache layout, which the kit reads directly."""
    return tuple(backend.get_kv_cache_shape(3, BLOCK, KV_HEADS, HEAD)) == (2, 3, BLOCK, KV_HEADS, HEAD)


def _backend_metadata(backend: type[AttentionBackend], case: AttentionCase, device: torch.device,
                      dtype: torch.dtype, common: Any) -> Any:
    """``backend``'s metadata for the case's step, built as the runner builds it."""
    kv_spec = KVCacheSpec(BLOCK, KV_HEADS, HEAD, case.kv_cache_dtype(dtype))
    return backend.get_builder_cls()(kv_spec, device, 64, 512).build(common)


def _cache_error(cache: torch.Tensor, ref_cache: torch.Tensor) -> float:
    """Largest difference between two caches, relative to the reference's largest entry."""
    return float((cache.float() - ref_cache.float()).abs().max()) / float(ref_cache.float().abs().max())


def run_case(backend: type[AttentionBackend], case: AttentionCase, device: torch.device,
             dtype: torch.dtype) -> CaseResult:
    """Run ``backend`` and the reference on the case's step; relative errors of output and cache."""
    q, k, v, cache, common = build_step(case, device, dtype)
    ref_cache = cache.clone()
    n = common.num_actual_tokens
    spec = layer_spec(case, dtype)
    if case.encoder_only:
        expected = bidirectional_reference(q, k, v, common.query_start_loc_cpu, len(case.requests), spec.scale)
    else:
        write_kv(k[:n], v[:n], ref_cache, common.slot_mapping, *case.scales)
    slopes = torch.tensor(spec.alibi_slopes, device=device) if spec.alibi_slopes else None
    expected = expected if case.encoder_only else paged_attention(q, ref_cache, common.query_start_loc_cpu, common.seq_lens_cpu, common.block_table,
                               spec.scale, torch.zeros_like(q), case.sliding_window, slopes, len(case.requests),
                               *case.scales, visible_until=common.visible_until_cpu)
    out = torch.zeros_like(q)
    backend.get_impl_cls()(spec).forward(q, k, v, cache, _backend_metadata(backend, case, device, dtype, common), out)
    scale = float(expected[:n].float().abs().max())
    output_error = float((out[:n].float() - expected[:n].float()).abs().max()) / scale
    return CaseResult(output_error, _cache_error(cache, ref_cache))


def write_case_error(backend: type[AttentionBackend], case: AttentionCase, device: torch.device,
                     dtype: torch.dtype) -> float:
    """How far the cache a backend's ``write_kv`` (the write without attention, for a backend that sets
    ``writes_kv_alone``) leaves is from the reference's write of the case's step (relative)."""
    _, k, v, cache, common = build_step(case, device, dtype)
    ref_cache = cache.clone()
    n = common.num_actual_tokens
    write_kv(k[:n], v[:n], ref_cache, common.slot_mapping, *case.scales)
    metadata = _backend_metadata(backend, case, device, dtype, common)
    backend.get_impl_cls()(layer_spec(case, dtype)).write_kv(k, v, cache, metadata)
    return _cache_error(cache, ref_cache)


def bidirectional_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, query_start_loc_cpu: torch.Tensor,
                            num_reqs: int, scale: float) -> torch.Tensor:
    """Encoder-only attention, one unmasked SDPA per request: what an encoder-only backend must compute."""
    out = torch.zeros_like(q)
    starts = query_start_loc_cpu[: num_reqs + 1].tolist()
    for i in range(num_reqs):
        a, b = starts[i], starts[i + 1]
        if b > a:
            out[a:b] = attend(q[a:b], k[a:b], v[a:b], None, scale)
    return out
