"""Paged attention on the CPU: a C kernel for decodes, torch ops for the rest.

Decode requests (one query token each) take the C kernel of :mod:`infercore_cpu.native` when it is built
and the cache is float32 or bfloat16 (no ALiBi): it reads K/V straight from the paged cache through
the block table, all decodes of the step in one call. Otherwise they are served in a few groups of
similar context length: each group's K/V is gathered through the block table into a persistent
scratch buffer (fresh large allocations cost page faults on every layer) and attended with one SDPA
call under a length mask. Prefill requests run one SDPA each; a request with nothing cached uses its
fresh K/V directly (rounded through the cache format when the cache is fp8, so it attends over what a
later step reads).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from infercore.plugin_api import (
    ENCODER_ONLY,
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
    attention_reference,
    encoder_only_attention,
    kv_cache_fp8,
)
from infercore_cpu import native, thread_budget

attend = attention_reference.attend
causal_mask = attention_reference.causal_mask
bounded_mask = attention_reference.bounded_mask
gather_context = attention_reference.gather_context
write_kv = attention_reference.write_kv

#: Decode requests are sorted by context length and split into at most this many groups (of at
#: least ``MIN_GROUP_SIZE`` each), so short contexts are not padded to the longest one.
MAX_DECODE_GROUPS = 8
MIN_GROUP_SIZE = 8
#: dtype codes of the C kernels.
_NATIVE_DTYPES = {torch.float32: 0, torch.bfloat16: 1}


@dataclass
class DecodeBatch:
    """The step's decode requests, in batch order."""

    rows: torch.Tensor  # int64 [n]: their query rows in the flattened batch
    request_indices: torch.Tensor  # int64 [n]: their rows of the block table
    seq_lens: torch.Tensor  # int64 [n]


@dataclass
class DecodeGroup:
    """Decode requests padded to the longest context among them."""

    rows: torch.Tensor  # int64 [n]: their query rows in the flattened batch
    blocks: torch.Tensor  # int64 [n * num_blocks]: their block-table rows, flattened
    num_blocks: int
    seq_lens: torch.Tensor  # int64 [n]
    valid: torch.Tensor  # bool [n, 1, 1, num_blocks * block_size]: context position < seq_len
    request_indices: torch.Tensor  # int64 [n]: their rows of the block table


@dataclass
class PrefillRequest:
    """One request with several query tokens: rows ``start:end``, ``seq_len`` tokens of context."""

    index: int
    start: int
    end: int
    seq_len: int


@dataclass
class TorchPagedMetadata:
    """Host-side layout of one step, shared by every layer."""

    num_actual_tokens: int
    slot_mapping: torch.Tensor
    block_table: torch.Tensor
    decodes: DecodeBatch | None
    prefills: list[PrefillRequest]
    #: Builds the decode groups and their scratch (for the torch decode path), on first need.
    make_groups: Callable[[], tuple[list[DecodeGroup], tuple[torch.Tensor, torch.Tensor]]]
    #: Request boundaries and count, for encoder-only (bidirectional) layers.
    query_start_loc_cpu: torch.Tensor | None = None
    num_reqs: int = 0
    #: Per-token visibility bounds (image spans of Gemma 3), or None: every query causal.
    visible_until: torch.Tensor | None = None
    _groups: tuple[list[DecodeGroup], tuple[torch.Tensor, torch.Tensor]] | None = field(default=None, repr=False)

    @property
    def decode_groups(self) -> list[DecodeGroup]:
        """Decode requests in groups of similar length (built on first use, then kept for the step)."""
        return self._grouped()[0]

    @property
    def scratch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Flat K and V scratch buffers (kv-cache dtype) that decode groups gather into."""
        return self._grouped()[1]

    def _grouped(self) -> tuple[list[DecodeGroup], tuple[torch.Tensor, torch.Tensor]]:
        if self._groups is None:
            self._groups = self.make_groups()
        return self._groups


class TorchPagedMetadataBuilder(AttentionMetadataBuilder):
    """Splits the step's requests into decode groups and a list of prefills; owns the scratch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._scratch = (torch.empty(0, dtype=self.spec.dtype), torch.empty(0, dtype=self.spec.dtype))

    def build(self, common: CommonAttentionMetadata) -> TorchPagedMetadata:
        thread_budget.on_step()  # once a step, on the thread that runs the ops
        starts = common.query_start_loc_cpu[: common.num_reqs + 1].tolist()
        seq_lens = common.seq_lens_cpu[: common.num_reqs].tolist()
        decodes, prefills = [], []
        for i, seq_len in enumerate(seq_lens):
            if starts[i + 1] - starts[i] == 1:
                decodes.append(i)
            elif starts[i + 1] > starts[i]:
                prefills.append(PrefillRequest(i, starts[i], starts[i + 1], seq_len))
        batch = None
        if decodes:
            batch = DecodeBatch(torch.tensor([starts[i] for i in decodes], dtype=torch.int64),
                                torch.tensor(decodes, dtype=torch.int64),
                                torch.tensor([seq_lens[i] for i in decodes], dtype=torch.int64))

        def make_groups() -> tuple[list[DecodeGroup], tuple[torch.Tensor, torch.Tensor]]:
            groups = self._decode_groups(common.block_table, list(decodes), starts, seq_lens) if decodes else []
            return groups, self._scratch_for(groups)

        return TorchPagedMetadata(common.num_actual_tokens, common.slot_mapping[: common.num_actual_tokens],
                                  common.block_table, batch, prefills, make_groups, common.query_start_loc_cpu,
                                  common.num_reqs, common.visible_until_cpu)

    def _decode_groups(self, block_table: torch.Tensor, decodes: list[int], starts: list[int],
                       seq_lens: list[int]) -> list[DecodeGroup]:
        decodes.sort(key=lambda i: seq_lens[i])
        num_groups = max(1, min(MAX_DECODE_GROUPS, len(decodes) // MIN_GROUP_SIZE))
        groups = []
        for part in torch.tensor(decodes).chunk(num_groups):
            lens = torch.tensor([seq_lens[i] for i in part.tolist()], dtype=torch.int64)
            num_blocks = -(-int(lens.max()) // self.spec.block_size)
            positions = torch.arange(num_blocks * self.spec.block_size)
            valid = (positions.unsqueeze(0) < lens.unsqueeze(1)).view(len(part), 1, 1, -1)
            rows = torch.tensor([starts[i] for i in part.tolist()], dtype=torch.int64)
            blocks = block_table[part, :num_blocks].reshape(-1).to(torch.int64)
            groups.append(DecodeGroup(rows, blocks, num_blocks, lens, valid, part.to(torch.int64)))
        return groups

    def _scratch_for(self, groups: list[DecodeGroup]) -> tuple[torch.Tensor, torch.Tensor]:
        per_block = self.spec.block_size * self.spec.num_kv_heads * self.spec.head_size
        needed = max((g.blocks.numel() * per_block for g in groups), default=0)
        if needed > self._scratch[0].numel():
            size = needed + needed // 4
            self._scratch = (torch.empty(size, dtype=self.spec.dtype, device=self.device),
                             torch.empty(size, dtype=self.spec.dtype, device=self.device))
        return self._scratch


class TorchPagedAttentionImpl(AttentionImpl):
    """Writes K/V into the paged cache, then attends (grouped batched decode, per-request prefill)."""

    writes_kv_alone = True

    def write_kv(self, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, metadata: Any) -> None:
        meta: TorchPagedMetadata = metadata
        self._write(self._native(kv_cache, meta.block_table, k, v), k, v, kv_cache, meta)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                metadata: Any, out: torch.Tensor) -> torch.Tensor:
        meta: TorchPagedMetadata = metadata
        if self.spec.attn_type == ENCODER_ONLY:  # bidirectional, no KV cache
            return encoder_only_attention(q, k, v, meta.query_start_loc_cpu, meta.num_reqs, self.scale, out)
        lib = self._native(kv_cache, meta.block_table, q, k, v, out)
        self._write(lib, k, v, kv_cache, meta)
        if self.alibi_slopes is not None:
            return self._with_alibi(q, kv_cache, meta, out)
        if meta.decodes is not None and not (lib is not None and self._decode_native(lib, q, kv_cache, meta, out)):
            for group in meta.decode_groups:
                out[group.rows] = self._decode(q[group.rows], kv_cache, group, meta.scratch)
        for req in meta.prefills:
            out[req.start:req.end] = self._prefill(q, k, v, kv_cache, meta.block_table, req, meta.visible_until)
        return out

    def _with_alibi(self, q: torch.Tensor, kv_cache: torch.Tensor, meta: TorchPagedMetadata,
                    out: torch.Tensor) -> torch.Tensor:
        """ALiBi models take the reference path, one request at a time (the cache is already written)."""
        slopes = torch.tensor(self.alibi_slopes, device=q.device)
        if meta.decodes is not None:
            decodes = meta.decodes
            for row, seq_len, index in zip(decodes.rows.tolist(), decodes.seq_lens.tolist(),
                                           decodes.request_indices.tolist(), strict=True):
                keys, values = gather_context(kv_cache, meta.block_table[index], seq_len, self.k_scale,
                                              self.v_scale)
                mask = causal_mask(1, seq_len, self.sliding_window, q.device)
                out[row:row + 1] = attend(q[row:row + 1], keys, values, mask, self.scale, slopes)
        for req in meta.prefills:
            keys, values = gather_context(kv_cache, meta.block_table[req.index], req.seq_len, self.k_scale,
                                          self.v_scale)
            mask = causal_mask(req.end - req.start, req.seq_len, self.sliding_window, q.device)
            out[req.start:req.end] = attend(q[req.start:req.end], keys, values, mask, self.scale, slopes)
        return out

    def _write(self, lib: ctypes.CDLL | None, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
               meta: TorchPagedMetadata) -> None:
        """Store the step's K/V: the C kernel where it takes them, else the torch reference."""
        n = meta.num_actual_tokens
        if lib is None or not self._write_native(lib, k[:n], v[:n], kv_cache, meta.slot_mapping):
            write_kv(k[:n], v[:n], kv_cache, meta.slot_mapping, self.k_scale, self.v_scale)

    def _native(self, kv_cache: torch.Tensor, block_table: torch.Tensor, *tensors: torch.Tensor) -> ctypes.CDLL | None:
        """The C kernels, when built and the cache and ``tensors`` (q, k, v and out; k and v for the cache write
        alone) are laid out as they read them (else None)."""
        first = tensors[0]
        if (first.dtype not in _NATIVE_DTYPES or kv_cache.dtype not in _NATIVE_DTYPES
                or any(t.dtype != first.dtype or t.stride(-1) != 1 for t in tensors) or not kv_cache.is_contiguous()
                or block_table.dtype != torch.int32 or block_table.stride(-1) != 1 or first.device.type != "cpu"):
            return None
        return native.library()

    def _write_native(self, lib: ctypes.CDLL, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                      slot_mapping: torch.Tensor) -> bool:
        """Store this step's K/V with the C kernel; False (nothing written) when it does not take them."""
        width = self.num_kv_heads * self.head_size
        if (k.shape[0] == 0 or slot_mapping.dtype != torch.int64 or not slot_mapping.is_contiguous()
                or slot_mapping.shape[0] < k.shape[0]
                or any(t.stride(1) != self.head_size or t.stride(2) != 1 for t in (k, v))):
            return k.shape[0] == 0
        return lib.infercore_write_kv(k.data_ptr(), k.stride(0), v.data_ptr(), v.stride(0), _NATIVE_DTYPES[k.dtype],
                                      kv_cache[0].data_ptr(), kv_cache[1].data_ptr(), _NATIVE_DTYPES[kv_cache.dtype],
                                      slot_mapping.data_ptr(), k.shape[0], width) == 0

    def _decode_native(self, lib: ctypes.CDLL, q: torch.Tensor, kv_cache: torch.Tensor, meta: TorchPagedMetadata,
                       out: torch.Tensor) -> bool:
        """Every decode request of the step in one call of the C kernel; False when it refuses the sizes."""
        decodes, table = meta.decodes, meta.block_table
        assert decodes is not None
        return lib.infercore_paged_decode(
            q.data_ptr(), _NATIVE_DTYPES[q.dtype], q.stride(0), q.stride(1), out.data_ptr(), out.stride(0),
            out.stride(1), kv_cache[0].data_ptr(), kv_cache[1].data_ptr(), _NATIVE_DTYPES[kv_cache.dtype],
            table.data_ptr(), table.stride(0), decodes.rows.data_ptr(), decodes.request_indices.data_ptr(),
            decodes.seq_lens.data_ptr(), decodes.rows.numel(), self.num_heads, self.num_kv_heads, self.head_size,
            kv_cache.shape[2], self.scale, self.sliding_window or 0, 0.0) == 0

    def _gather(self, cache: torch.Tensor, group: DecodeGroup, scratch: torch.Tensor) -> torch.Tensor:
        """[n, kv_heads, padded_len, head_size] view of the group's context, copied into ``scratch``."""
        buf = scratch[: group.blocks.numel() * cache[0].numel()].view(-1, *cache.shape[1:])
        torch.index_select(cache, 0, group.blocks, out=buf)
        return buf.view(group.rows.numel(), -1, self.num_kv_heads, self.head_size).transpose(1, 2)

    @staticmethod
    def _read(entries: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
        """Cache entries as ``dtype`` values (an fp8 cache's dequantized with its scale)."""
        if kv_cache_fp8.is_fp8_kv(entries.dtype):
            return kv_cache_fp8.dequantize_kv(entries, scale, dtype)
        return entries.to(dtype)

    def _stored(self, x: torch.Tensor, scale: float, kv_cache: torch.Tensor) -> torch.Tensor:
        """``x`` as the cache will give it back (quantized and dequantized when the cache is fp8)."""
        if kv_cache_fp8.is_fp8_kv(kv_cache.dtype):
            return kv_cache_fp8.dequantize_kv(kv_cache_fp8.quantize_kv(x, scale), scale, x.dtype)
        return x

    def _decode(self, q: torch.Tensor, kv_cache: torch.Tensor, group: DecodeGroup,
                scratch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        keys = self._read(self._gather(kv_cache[0], group, scratch[0]), self.k_scale, q.dtype)
        values = self._read(self._gather(kv_cache[1], group, scratch[1]), self.v_scale, q.dtype)
        mask = group.valid
        if self.sliding_window is not None:
            positions = torch.arange(keys.shape[2]).view(1, 1, 1, -1)
            mask = mask & (positions > (group.seq_lens - 1 - self.sliding_window).view(-1, 1, 1, 1))
        out = F.scaled_dot_product_attention(q.unsqueeze(2), keys, values, attn_mask=mask, scale=self.scale,
                                             enable_gqa=self.num_heads != self.num_kv_heads)
        return out.squeeze(2)

    def _prefill(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                 block_table: torch.Tensor, req: PrefillRequest, bounds: torch.Tensor | None) -> torch.Tensor:
        query_len = req.end - req.start
        qs = q[req.start:req.end]
        if bounds is not None and bool((bounds[req.start:req.end] > torch.arange(req.seq_len - query_len,
                                                                                 req.seq_len)).any()):
            # Some of its tokens lie in an image span and see the whole span.
            keys, values = gather_context(kv_cache, block_table[req.index], req.seq_len, self.k_scale, self.v_scale)
            mask = bounded_mask(query_len, req.seq_len, self.sliding_window, bounds[req.start:req.end], q.device)
            return attend(qs, keys, values, mask, self.scale)
        if req.seq_len == query_len and self.sliding_window is None:
            # Nothing cached before this step: attend over the fresh K/V with a plain causal mask.
            # Batched (4-D) inputs: torch's CPU flash kernel takes those, 3-D ones fall back to math.
            keys = self._stored(k[req.start:req.end], self.k_scale, kv_cache)
            values = self._stored(v[req.start:req.end], self.v_scale, kv_cache)
            out = F.scaled_dot_product_attention(
                qs.transpose(0, 1).unsqueeze(0), keys.transpose(0, 1).unsqueeze(0),
                values.transpose(0, 1).unsqueeze(0),
                is_causal=True, scale=self.scale, enable_gqa=self.num_heads != self.num_kv_heads)
            return out.squeeze(0).transpose(0, 1)
        keys, values = gather_context(kv_cache, block_table[req.index], req.seq_len, self.k_scale, self.v_scale)
        mask = causal_mask(query_len, req.seq_len, self.sliding_window, q.device)
        return attend(qs, keys, values, mask, self.scale)


class TorchPagedAttentionBackend(AttentionBackend):
    """The CPU platform's attention: torch SDPA over the default paged cache layout."""

    name = "torch_paged"
    supports_encoder_only = True
    supports_visible_bounds = True

    @staticmethod
    def get_builder_cls() -> type[AttentionMetadataBuilder]:
        return TorchPagedMetadataBuilder

    @staticmethod
    def get_impl_cls() -> type[AttentionImpl]:
        return TorchPagedAttentionImpl
