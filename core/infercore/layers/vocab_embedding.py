"""Token embedding and LM head, with the vocabulary split across the tensor-parallel group."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from infercore.layers.tensor_parallel import get_tp_state
from infercore.ops import get_op


class VocabParallelEmbedding(nn.Module):
    """Embedding table whose rows (vocabulary entries) are split across ranks.

    Each rank holds ``ceil(vocab / tp_size)`` rows, padded past the vocabulary; ids outside a
    rank's range embed to zero there and the group sums the partial results.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        tp = get_tp_state()
        self.tp_rank, self.tp_size = tp.rank, tp.size
        self.num_embeddings = num_embeddings
        self.rows_per_rank = -(-num_embeddings // tp.size)
        self.vocab_start = tp.rank * self.rows_per_rank
        self.weight = nn.Parameter(torch.empty(self.rows_per_rank, embedding_dim), requires_grad=False)
        self.weight.weight_loader = self.weight_loader

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor) -> None:
        if loaded.shape[0] != self.num_embeddings or loaded.shape[1] != param.shape[1]:
            raise ValueError(f"checkpoint embedding of shape {tuple(loaded.shape)} does not fit a vocabulary of "
                             f"{self.num_embeddings} x {param.shape[1]}; the config does not match the weights")
        rows = min(self.rows_per_rank, self.num_embeddings - self.vocab_start)
        param.data[:rows].copy_(loaded.narrow(0, self.vocab_start, rows))
        param.data[rows:].zero_()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return F.embedding(input_ids, self.weight)
        local = input_ids - self.vocab_start
        outside = (local < 0) | (local >= self.rows_per_rank)
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
        out.masked_fill_(outside.unsqueeze(-1), 0)
        return get_tp_state().all_reduce(out)


class ParallelLMHead(VocabParallelEmbedding):
    """The output projection to vocabulary logits, sharded like the embedding it may be tied to."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__(num_embeddings, embedding_dim)
        self._linear = get_op("linear")

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, hidden] → [N, vocab] logits in the weights' dtype, gathered over the group.

        No float32 copy: the sampler converts where it needs float32 (logprobs, penalties, biases,
        masks, truncation) and otherwise samples straight from these. Rows are contiguous; with
        tensor parallelism the result may be a column slice (row stride above ``vocab``).
        """
        logits = self._linear(hidden, self.weight)
        if self.tp_size > 1:
            parts = [torch.empty_like(logits) for _ in range(self.tp_size)]
            get_tp_state().all_gather(parts, logits)
            logits = torch.cat(parts, dim=-1)
        return logits[:, :self.num_embeddings]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("ParallelLMHead projects hidden states to logits; call compute_logits")
