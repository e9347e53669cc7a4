"""The "triton" attention backend: paged KV cache write, split-K decode and ragged prefill kernels.

An fp8 (e4m3) cache is quantized with saturation on write and read back with the layer's scales.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import triton

from infercore.plugin_api import (
    ENCODER_ONLY,
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionRequest,
    CommonAttentionMetadata,
    KVCacheSpec,
    QKNormRotary,
    kv_cache_fp8,
)
from infercore_triton.decode_attention import (
    DecodeConfig,
    decode_attention,
    merges_in_kernel,
    multiprocessor_count,
)
from infercore_triton.decode_fp8_table import load_table as load_fp8_decode_table
from infercore_triton.encoder_attention import encoder_attention
from infercore_triton.fp8_support import has_fp8_dot
from infercore_triton.kv_cache_write import write_kv
from infercore_triton.prefill_attention import prefill_attention
from infercore_triton.qk_norm_rotary_kv_write import qk_norm_rotary_write_kv
from infercore_triton.split_k_counters import tile_counters

#: Fewest context tokens (of the block table's width) per split: one 64-token tile. The split count
#: is fixed by the table's width, not by this step's lengths, and a split's range is rounded up to whole
#: tiles, so a coarser bound only leaves short contexts in a narrow table (a small max_model_len) with
#: fewer programs than they could use. On an H200 at batch 1, 256 here made a 1024-token table's steps
#: about 85 µs (8%) slower than a 4096-token table's over the same 512-768-token contexts (4 splits
#: against 16).
MIN_TOKENS_PER_SPLIT = 64
MAX_SPLITS = 32


#: Decode programs per multiprocessor a split launch aims for over a bf16 cache. On an H200 (ragged W-GPU
#: batches: contexts 100-2,048 in a 4,096-token table, longest first, 128-token tiles, timed from CUDA-graph
#: replays by ``benchmarks/decode_attention.py --split-sweep``), from batch 16 to 128 the best split counts
#: put 12-23 programs on each multiprocessor, and counts near 12 were within 1% of the best. At batch
#: 16/32/64/96 the best took 31.6/52.3/79.8/127.7 µs against 36.2/57.3/90.6/136.5 with two programs per
#: multiprocessor and 64-token tiles. Over an fp8 cache the split count was not re-measured: two per SM.
PROGRAMS_PER_SM = 12
FP8_PROGRAMS_PER_SM = 2


#: Pure-decode steps pass their split count to the decode kernel at run time, as mixed steps do, so one
#: compiled variant serves every captured batch size: on an H100 the 8B shape's graph capture built 4 decode
#: variants instead of 11 (3.1 s less on a fresh machine) at the same single-stream latency (0.6B shape 1.167
#: against 1.170 ms/token, 8B 6.276 against 6.279). ``INFERCORE_DECODE_SPLITS=static`` compiles each batch
#: size's count into its own variant instead.
SPLITS_ENV = "INFERCORE_DECODE_SPLITS"


def runtime_split_counts() -> bool:
    """Whether pure-decode steps take their split count at run time (all but ``INFERCORE_DECODE_SPLITS=static``)."""
    return os.environ.get(SPLITS_ENV, "runtime") != "static"


def choose_num_splits(num_reqs: int, num_kv_heads: int, max_context: int, num_sms: int,
                      fp8_cache: bool = False, programs_per_sm: int | None = None) -> int:
    """Splits per (sequence, KV head) so that a decode launch has about :data:`PROGRAMS_PER_SM` programs per
    multiprocessor (over an fp8 cache, the fp8 decode table's count, else :data:`FP8_PROGRAMS_PER_SM`; or
    ``programs_per_sm``), each split at least :data:`MIN_TOKENS_PER_SPLIT` of the table wide.

    Depends only on the batch size and the block table's width, never on this step's lengths, so
    a step replayed from a captured graph keeps the split count it was captured with.
    """
    programs = max(1, num_reqs * num_kv_heads)
    per_sm = programs_per_sm or PROGRAMS_PER_SM
    if fp8_cache and programs_per_sm is None:
        table = load_fp8_decode_table()
        per_sm = (table.programs_per_sm if table else None) or FP8_PROGRAMS_PER_SM
    wanted = triton.cdiv(per_sm * num_sms, programs)
    by_context = max(1, triton.cdiv(max_context, MIN_TOKENS_PER_SPLIT))
    return max(1, min(wanted, by_context, MAX_SPLITS))


#: Decode batches of at least this many sequences load 128-token tiles (over a bf16 cache). With the
#: split counts above, on an H200 the 128-token tile was as fast or faster at every batch from 8 to 256
#: (18.1 against 19.1 µs at batch 8, 147.5 against 151.9 at 128); batches under 8 keep 64-token tiles,
#: whose splits reach more of a short context.
WIDE_TILE_MIN_BATCH = 8
_WIDE_TILE = DecodeConfig(block_n=128, num_warps=4, num_stages=3)


#: Over an fp8 cache a 128-token tile holds the bytes of a 64-token bf16 one: 2.79 TB/s on an H200
#: (batch 256 x context 1024), the best of 36 configurations.
_FP8_TILE = DecodeConfig(block_n=128, num_warps=4, num_stages=3)


def choose_decode_config(num_reqs: int, fp8_cache: bool = False) -> DecodeConfig:
    """Launch parameters of the decode kernel for a batch of ``num_reqs`` (graph-stable: size only); over an
    fp8 cache, the setting of the table ``INFERCORE_DECODE_FP8_TABLE`` names, if any."""
    if fp8_cache:
        table = load_fp8_decode_table()
        return table.config if table else _FP8_TILE
    return _WIDE_TILE if num_reqs >= WIDE_TILE_MIN_BATCH else DecodeConfig()


def count_leading_decodes(query_start_loc_cpu: torch.Tensor, num_reqs: int) -> int:
    """How many requests at the front of the batch have a one-token query."""
    query_lens = query_start_loc_cpu[1: num_reqs + 1] - query_start_loc_cpu[:num_reqs]
    longer = torch.nonzero(query_lens != 1)
    return int(longer[0, 0]) if len(longer) else num_reqs


def _converts_fp8(device_type: str) -> bool:
    """Whether Triton converts e4m3 on this device type's current device: an NVIDIA GPU of capability 8.9+,
    or the host (Triton's interpreter). ROCm's and Intel's fp8 paths are untested, so they are refused."""
    if device_type == "cpu":
        return True
    return (device_type == "cuda" and torch.cuda.is_available()
            and has_fp8_dot(torch.device("cuda", torch.cuda.current_device())))


@dataclass
class TritonAttentionMetadata:
    """One step's layout for the Triton kernels; the tensors are the runner's persistent views.

    The first ``num_decodes`` requests (one query token each) run the decode kernel, the rest the
    prefill kernel, so decodes in a mixed step do not pay for a prefill tile each. A step padded for a
    whole-step graph (``uniform``) launches both kernels over every request instead: each program
    looks up on the device whether its request is a decode, so the launches depend on the padded
    counts alone.
    """

    num_reqs: int
    num_actual_tokens: int
    max_query_len: int
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    num_decodes: int
    #: Context splits and launch parameters of the decode kernel for the leading decodes.
    num_splits: int
    decode_config: DecodeConfig
    uniform: bool = False
    #: Whether the decode kernel takes ``num_splits`` at run time (steps with prompt tokens, replayed whole or
    #: not) rather than compiled in: one compiled variant serves every split count they use.
    runtime_splits: bool = False
    #: Per-token visibility bounds for the prefill kernel (models with bidirectional image spans), or None.
    visible_until: torch.Tensor | None = None
    #: Queries of up to this many tokens (speculative verification) run the decode kernel, one decode per
    #: query token, in ``num_splits`` splits; 1: only one-token queries do.
    short_queries: int = 1
    #: Whether every query of the step is that short (the prefill kernel is not launched).
    all_short: bool = False


class TritonAttentionMetadataBuilder(AttentionMetadataBuilder):
    """Chooses the decode split count; keeps the runner's buffers so graph replays see new values."""

    def __init__(self, spec: KVCacheSpec, device: torch.device, max_num_reqs: int, max_num_tokens: int) -> None:
        super().__init__(spec, device, max_num_reqs, max_num_tokens)
        self.num_sms = multiprocessor_count(device)
        # The split kernels' arrival counters are made here, outside any graph capture, so that captured
        # decode steps merge their splits in the kernel rather than in a launch of their own (NVIDIA GPUs).
        if merges_in_kernel(device):
            tile_counters(device, 0)

    def _decode_launch(self, rows: int, max_context: int, fp8: bool) -> tuple[int, DecodeConfig]:
        """The split count and launch settings of a decode step of ``rows`` rows."""
        return (choose_num_splits(rows, self.spec.num_kv_heads, max_context, self.num_sms, fp8),
                choose_decode_config(rows, fp8))

    def build(self, common: CommonAttentionMetadata) -> TritonAttentionMetadata:
        n = common.num_reqs
        uniform = common.padded_for_graph and not common.is_pure_decode
        # Verification queries (1 + k tokens) attend as decodes of their tokens, split over the context like a
        # decode step of as many rows; not where image spans see ahead (the decode kernel is causal only).
        short = common.max_verify_len if common.max_verify_len > 1 and common.visible_until is None else 1
        all_short = short > 1 and not uniform and not common.is_pure_decode and common.max_query_len <= short
        fp8 = kv_cache_fp8.is_fp8_kv(self.spec.dtype)
        max_context = common.block_table.shape[1] * self.spec.block_size
        if short > 1 and (uniform or all_short):
            num_decodes = 0
            num_splits, config = self._decode_launch(
                len(common.slot_mapping) if uniform else common.num_actual_tokens, max_context, fp8)
        elif uniform:
            # Decodes found on the device among the padded requests: about two walking programs per
            # multiprocessor and split, the contexts split as a decode step of that many rows would be, so a
            # few decodes of long contexts beside a prompt chunk do not each run in one program.
            walkers = min(n, triton.cdiv(2 * self.num_sms, self.spec.num_kv_heads))
            num_decodes, config = 0, DecodeConfig()
            num_splits = choose_num_splits(walkers, self.spec.num_kv_heads, max_context, self.num_sms, fp8)
        elif common.is_pure_decode:
            num_decodes = n
            num_splits, config = self._decode_launch(n, max_context, fp8)
        else:
            # Decodes beside a prefill split their contexts as a pure-decode step of their count would, so
            # decodes of long contexts next to a long prompt's chunks still fill the device; the count is a
            # run-time argument of the kernel there, so the ragged decode counts of mixed steps never
            # compile new variants mid-run.
            num_decodes = count_leading_decodes(common.query_start_loc_cpu, n)
            num_splits, config = (self._decode_launch(num_decodes, max_context, fp8) if num_decodes
                                  else (1, choose_decode_config(0, fp8)))
        return TritonAttentionMetadata(
            num_reqs=n, num_actual_tokens=common.num_actual_tokens,
            max_query_len=common.max_query_len, query_start_loc=common.query_start_loc,
            seq_lens=common.seq_lens, block_table=common.block_table, slot_mapping=common.slot_mapping,
            num_decodes=num_decodes, num_splits=num_splits, decode_config=config,
            uniform=uniform, runtime_splits=not common.is_pure_decode or runtime_split_counts(),
            visible_until=common.visible_until, short_queries=short, all_short=all_short,
        )


class TritonAttentionImpl(AttentionImpl):
    """Writes the step's K/V into the cache, then runs the decode kernel on the leading one-token
    queries and the prefill kernel on the rest.

    Qwen3-style q/k norms and rotary run in the kernel that writes the cache
    (:mod:`infercore_triton.qk_norm_rotary_kv_write`): the attention kernels read keys only from the
    cache, so the rotated k is stored there and nowhere else.
    """

    fuses_qk_norm_rotary = True
    writes_kv_alone = True

    def write_kv(self, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, metadata: Any) -> None:
        meta: TritonAttentionMetadata = metadata
        write_kv(k, v, kv_cache, meta.slot_mapping, *self._scales(kv_cache))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                metadata: Any, out: torch.Tensor) -> torch.Tensor:
        meta: TritonAttentionMetadata = metadata
        if self.spec.attn_type == ENCODER_ONLY:  # bidirectional over the step's own k/v, no KV cache
            return encoder_attention(q, k, v, meta.query_start_loc, meta.num_reqs, meta.max_query_len, self.scale, out)
        self.write_kv(k, v, kv_cache, meta)
        return self._attend(q, kv_cache, meta, out, *self._scales(kv_cache))

    def forward_qk_norm_rotary(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                               metadata: Any, out: torch.Tensor, qk_norm_rotary: QKNormRotary) -> torch.Tensor:
        meta: TritonAttentionMetadata = metadata
        k_scale, v_scale = self._scales(kv_cache)
        p = qk_norm_rotary
        qk_norm_rotary_write_kv(p.positions, q, k, v, p.q_weight, p.k_weight, p.eps, p.cos_sin_cache, kv_cache,
                                meta.slot_mapping, k_scale, v_scale, p.is_neox)
        return self._attend(q, kv_cache, meta, out, k_scale, v_scale)

    def _scales(self, kv_cache: torch.Tensor) -> tuple[float, float]:
        # Scales only mean something to an fp8 cache; other caches are read as stored.
        return (self.k_scale, self.v_scale) if kv_cache_fp8.is_fp8_kv(kv_cache.dtype) else (1.0, 1.0)

    def _attend(self, q: torch.Tensor, kv_cache: torch.Tensor, meta: TritonAttentionMetadata, out: torch.Tensor,
                k_scale: float, v_scale: float) -> torch.Tensor:
        n, d = meta.num_reqs, meta.num_decodes
        if meta.uniform or meta.all_short:
            decode_attention(q, kv_cache, meta.seq_lens, meta.block_table, self.scale, out, num_splits=meta.num_splits,
                             sliding_window=self.sliding_window, config=meta.decode_config, k_scale=k_scale,
                             v_scale=v_scale, query_start_loc=meta.query_start_loc, short_queries=meta.short_queries,
                             runtime_splits=meta.runtime_splits)
            if meta.all_short:
                return out
            return prefill_attention(q, kv_cache, meta.query_start_loc, meta.seq_lens, meta.block_table, self.scale,
                                     out, meta.max_query_len, sliding_window=self.sliding_window, k_scale=k_scale,
                                     v_scale=v_scale, uniform_grid=True, visible_until=meta.visible_until,
                                     short_queries=meta.short_queries)
        if d > 0:
            decode_attention(q[:d], kv_cache, meta.seq_lens[:d], meta.block_table[:d], self.scale, out[:d],
                             num_splits=meta.num_splits, sliding_window=self.sliding_window,
                             config=meta.decode_config, k_scale=k_scale, v_scale=v_scale,
                             runtime_splits=meta.runtime_splits)
        if d < n:
            # Query rows are addressed through query_start_loc, which already counts the decodes' tokens.
            prefill_attention(q, kv_cache, meta.query_start_loc[d:n + 1], meta.seq_lens[d:n], meta.block_table[d:n],
                              self.scale, out, meta.max_query_len, sliding_window=self.sliding_window,
                              k_scale=k_scale, v_scale=v_scale, visible_until=meta.visible_until)
        return out


class TritonAttentionBackend(AttentionBackend):
    """Paged attention in Triton for any GPU Triton targets (CUDA, ROCm, XPU)."""

    name = "triton"
    captures_mixed_steps = True
    supports_encoder_only = True
    supports_visible_bounds = True

    @classmethod
    def validate(cls, request: AttentionRequest) -> list[str]:
        reasons = []
        if request.num_heads % request.num_kv_heads:
            reasons.append(f"{request.num_heads} query heads are not a multiple of {request.num_kv_heads} KV heads")
        if request.head_size > 256:
            reasons.append(f"head size {request.head_size} is over 256, the largest these kernels tile")
        if request.alibi:
            reasons.append("ALiBi biases are not implemented in the Triton kernels")
        supported = (torch.float32, torch.float16, torch.bfloat16)
        if request.dtype not in supported:
            reasons.append(f"dtype {request.dtype} is not one of float32, float16, bfloat16")
        if request.kv_cache_dtype not in (*supported, kv_cache_fp8.FP8_KV_DTYPE):
            reasons.append(f"KV cache dtype {request.kv_cache_dtype} is not one of float32, float16, bfloat16, "
                           "float8_e4m3fn")
        elif kv_cache_fp8.is_fp8_kv(request.kv_cache_dtype) and not _converts_fp8(request.device_type):
            reasons.append("an fp8 KV cache needs an NVIDIA GPU of compute capability 8.9+ (FP8 conversions); "
                           "use --kv-cache-dtype auto")
        return reasons

    @staticmethod
    def get_builder_cls() -> type[AttentionMetadataBuilder]:
        return TritonAttentionMetadataBuilder

    @staticmethod
    def get_impl_cls() -> type[AttentionImpl]:
        return TritonAttentionImpl
