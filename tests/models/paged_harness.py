"""The model runner's job in miniature: paged KV cache with shuffled blocks, hand-built metadata."""

from __future__ import annotations

import random

import torch
from torch import nn

from infercore.attention import CommonAttentionMetadata
from infercore.attention.binding import bind_attention
from infercore.forward_context import ForwardContext, set_forward_context
from infercore.kv_cache.spec import KVCacheSpec
from infercore_cpu.attention import TorchPagedAttentionBackend


class PagedHarness:
    """Runs a model step by step over a paged cache whose blocks are handed out in shuffled order."""

    def __init__(self, model: nn.Module, block_size: int = 16, num_blocks: int = 64, seed: int = 0) -> None:
        config = model.config
        head_size = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        dtype = next(model.parameters()).dtype
        self.model = model
        self.block_size = block_size
        self.spec = KVCacheSpec(block_size, config.num_key_value_heads, head_size, dtype)
        shape = TorchPagedAttentionBackend.get_kv_cache_shape(num_blocks, block_size, config.num_key_value_heads,
                                                             head_size)
        # Garbage, not zeros, so reading an unwritten slot shows up in the logits.
        self.kv_caches = [torch.randn(shape, dtype=dtype) * 100 for _ in range(config.num_hidden_layers)]
        bind_attention(model, TorchPagedAttentionBackend, self.kv_caches)
        self.free_blocks = list(range(num_blocks))
        random.Random(seed).shuffle(self.free_blocks)
        self.builder = TorchPagedAttentionBackend.get_builder_cls()(self.spec, torch.device("cpu"), 64, 4096)
        self.block_tables: dict[int, list[int]] = {}
        self.num_computed: dict[int, int] = {}

    def _slots(self, req: int, new_tokens: int) -> list[int]:
        start = self.num_computed.get(req, 0)
        table = self.block_tables.setdefault(req, [])
        while len(table) * self.block_size < start + new_tokens:
            table.append(self.free_blocks.pop())
        return [table[p // self.block_size] * self.block_size + p % self.block_size
                for p in range(start, start + new_tokens)]

    def step(self, chunks: list[tuple[int, list[int]]]) -> list[torch.Tensor]:
        """Feed each request ``req`` its next tokens; returns the logits [len, vocab] of each chunk."""
        ids, positions, slots, starts, seq_lens = [], [], [], [0], []
        for req, tokens in chunks:
            start = self.num_computed.get(req, 0)
            slots += self._slots(req, len(tokens))
            ids += tokens
            positions += range(start, start + len(tokens))
            starts.append(starts[-1] + len(tokens))
            seq_lens.append(start + len(tokens))
            self.num_computed[req] = start + len(tokens)
        width = max(len(self.block_tables[req]) for req, _ in chunks) + 2
        table = torch.zeros(len(chunks), width, dtype=torch.int32)
        for i, (req, _) in enumerate(chunks):
            table[i, : len(self.block_tables[req])] = torch.tensor(self.block_tables[req])
        qsl = torch.tensor(starts, dtype=torch.int32)
        lens = torch.tensor(seq_lens, dtype=torch.int32)
        common = CommonAttentionMetadata(
            num_reqs=len(chunks), num_actual_tokens=len(ids), max_query_len=max(len(t) for _, t in chunks),
            max_seq_len=max(seq_lens), query_start_loc=qsl, seq_lens=lens, block_table=table,
            slot_mapping=torch.tensor(slots, dtype=torch.int64), query_start_loc_cpu=qsl, seq_lens_cpu=lens)
        with torch.no_grad(), set_forward_context(ForwardContext(self.builder.build(common), len(ids))):
            hidden = self.model(torch.tensor(ids), torch.tensor(positions))
            logits = self.model.compute_logits(hidden)
        return list(logits.split([len(t) for _, t in chunks]))
