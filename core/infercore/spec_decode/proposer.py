"""The ``Proposer`` interface: what a speculative method implements to guess a step's draft tokens.

A proposer is registered by name through the ``register_speculative_methods`` hook and exported by
``infercore.plugin_api``; the in-tree n-gram proposer (``infercore.spec_decode.ngram``) registers
through the same hook from core's builtin plugin.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

    from infercore.speculative_config import SpeculativeConfig

#: The token id in :attr:`Drafts.token_ids` past a row's count.
PAD_TOKEN_ID = -1


@dataclass(frozen=True)
class ProposerSpec:
    """What a proposer is built with. Later plugin API versions add fields with defaults only."""

    config: SpeculativeConfig
    vocab_size: int
    max_num_seqs: int
    max_model_len: int


@dataclass(frozen=True)
class Drafts:
    """One step's draft tokens, row by row in the order the rows were given.

    ``token_ids`` [B, K] int32 holds row ``b``'s drafts in its first ``num_drafts[b]`` entries and
    :data:`PAD_TOKEN_ID` after them; ``K`` is the largest count asked for. ``probs`` [B, K, V] float32
    (on the device that verifies) is the draft distribution each draft token was drawn from, for the
    model-based methods; None means each draft is a point mass on its token (n-gram lookup).
    """

    token_ids: np.ndarray
    num_drafts: np.ndarray
    probs: torch.Tensor | None = None

    @classmethod
    def empty(cls, num_rows: int, width: int) -> Drafts:
        """No draft for any of ``num_rows`` rows, padded to ``width``."""
        return cls(np.full((num_rows, width), PAD_TOKEN_ID, dtype=np.int32), np.zeros(num_rows, dtype=np.int32))


class Proposer(ABC):
    """Guesses the next tokens of each speculating row; the target model then verifies them.

    **Contract.** The engine builds one proposer per engine with ``cls(spec)`` (a :class:`ProposerSpec`)
    and calls :meth:`propose` once per step, on the host, for the rows that speculate in that step:

    * in: ``token_ids`` [B, L] integer array (a view of the runner's per-row table: row ``b`` holds its
      request's prompt followed by every output token so far in its first ``num_tokens[b]`` entries;
      what lies after them is garbage to ignore), ``num_tokens`` [B] and ``num_drafts`` [B], the most
      drafts row ``b`` may take this step (the configured ``k``, fewer near ``max_model_len``, 0 for a
      row that does not speculate);
    * out: :class:`Drafts` with ``0 <= drafts.num_drafts[b] <= num_drafts[b]`` tokens per row, padded
      with :data:`PAD_TOKEN_ID` to ``max(num_drafts)`` columns. Fewer drafts (none at all) is always
      allowed: the row then decodes one token as without speculation.

    The drafts must not depend on other rows of the batch. A proposer never changes its inputs, keeps
    no per-request state it cannot rebuild from the history (a preempted request comes back with its
    history alone), and must be cheap next to a step: the call sits on the step's critical path.
    Model-based proposers (draft model, EAGLE, MTP) get the target's hidden states through keyword
    arguments with defaults that a later plugin API minor version adds.
    """

    def __init__(self, spec: ProposerSpec) -> None:
        self.spec = spec

    @abstractmethod
    def propose(self, *, token_ids: np.ndarray, num_tokens: np.ndarray, num_drafts: np.ndarray) -> Drafts:
        """Up to ``num_drafts[b]`` draft tokens per row (see the class docstring)."""
