"""The model contract: what a model class is built with and what the engine calls on it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch


@dataclass(frozen=True)
class ModelSpec:
    """What a model is built with (``ModelClass.from_spec(spec)``).

    ``hf_config`` is the checkpoint's ``transformers`` config; ``dtype`` the activation and weight
    dtype the engine chose (parameters created while the model is built already have it: the
    loader sets torch's default dtype and device around construction, so a model never needs to
    cast itself). Fields added in later minor releases have defaults.
    """

    hf_config: Any
    dtype: torch.dtype
    device: torch.device = torch.device("cpu")
    #: Rank and size of the tensor-parallel group this model is one shard of (set by the loader from
    #: ``--tensor-parallel-size``; data-parallel replicas do not count). The parallel layers split
    #: themselves; a model sizes what it splits itself (heads per rank, views of fused projections) from these.
    tp_rank: int = 0
    tp_size: int = 1


@runtime_checkable
class CausalLM(Protocol):
    """A causal language model the engine can run (a ``torch.nn.Module``).

    * Built by ``from_spec(spec: ModelSpec)`` (a classmethod); a class without it is built as
      ``cls(spec.hf_config, spec.dtype)``.
    * ``forward(input_ids, positions)``: ``input_ids`` and ``positions`` are int64 [T], the flattened
      tokens of every request of the step (no padding between requests); returns hidden states
      [T, hidden]. Attention goes through :class:`infercore.plugin_api.Attention` layers, whose
      specs declare the KV cache (heads, KV heads, head size, window); the model never sees the
      cache layout or the batch's metadata.
    * ``compute_logits(hidden)``: [N, hidden] → [N, vocab] logits for the rows the engine samples.
    * Quantized weights: only floating-point parameters are created in ``spec.dtype``; a layer that
      stores packed integer weights creates them with their own dtype (the loader never casts a
      model), keeps its scales in whatever dtype it needs, and dequantizes in its own kernels.
    * ``load_weights(weights)``: ``weights`` yields ``(name, tensor)`` pairs with the checkpoint's raw
      names (exactly as in its safetensors files, prefixes such as ``model.`` included; a tied LM
      head is absent from the checkpoint and must be tied by the model, not expected). Tensors
      arrive whole (every tensor-parallel rank gets the full tensor) as plain ``torch.Tensor`` on the
      CPU in the checkpoint's dtype; copy them into parameters (``param.copy_`` casts), or hand them
      to a parallel layer's ``weight_loader``, which keeps this rank's share.
      Returns the set of *parameter names* (``named_parameters()`` names) it filled; the loader
      reports every parameter missing from it as an error naming them. Returning None skips that
      check (the model then reports missing weights itself).
    """

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Hidden states [T, hidden] of the flattened batch."""
        ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [N, vocab] of ``hidden`` [N, hidden]."""
        ...

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str] | None:
        """Copy checkpoint tensors into parameters; the names of the parameters filled."""
        ...
