"""Copies checkpoint tensors (HF names) into a model's parameters, fused projections included."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from infercore.layers.pipeline_parallel import MissingLayer
from infercore.models.kv_scales import KVScaleLoader


@dataclass(frozen=True)
class StackedParam:
    """Checkpoint projection ``source`` (e.g. ``q_proj``) is shard ``shard_id`` of fused ``fused`` (``qkv_proj``)."""

    fused: str
    source: str
    shard_id: int | str


class ExtraLoader(Protocol):
    """Loads the checkpoint tensors of parameters that name-for-name mapping cannot (stacked experts)."""

    def owns(self, param_name: str) -> bool:
        """Whether model parameter ``param_name`` is filled by this loader."""

    def load(self, name: str, tensor: torch.Tensor) -> bool:
        """Load checkpoint tensor ``name`` if it is one of this loader's; False when it is not."""

    def missing(self) -> list[str]:
        """What of its parameters no checkpoint tensor filled."""


def _default_loader(param: nn.Parameter, loaded: torch.Tensor) -> None:
    if param.shape != loaded.shape:
        raise ValueError(f"checkpoint tensor of shape {tuple(loaded.shape)} does not fit parameter of shape "
                         f"{tuple(param.shape)}; the config does not match the weights")
    param.data.copy_(loaded)


def _checkpoint_names(params: Iterable[str], stacked: list[StackedParam]) -> set[str]:
    """The checkpoint names a model with these parameters expects."""
    names: set[str] = set()
    for name in params:
        sources = [s for s in stacked if f".{s.fused}." in name]
        names.update(name.replace(f".{s.fused}.", f".{s.source}.") for s in sources)
        if not sources:
            names.add(name)
    return names


def missing_prefixes(model: nn.Module) -> tuple[str, ...]:
    """``"name."`` of each module of ``model`` that another pipeline stage holds."""
    return tuple(f"{name}." for name, module in model.named_modules() if isinstance(module, MissingLayer))


def load_checkpoint_weights(model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]],
                            stacked: list[StackedParam], ignore_prefixes: tuple[str, ...] = (),
                            extra: ExtraLoader | None = None) -> None:
    """Load every tensor of ``weights`` into ``model``; a tensor with no parameter, or a parameter
    no tensor fills, is an error naming it. Rotary ``inv_freq`` buffers and names starting with
    ``ignore_prefixes`` are skipped, and so are those of modules another pipeline stage holds
    (:class:`~infercore.layers.pipeline_parallel.MissingLayer`); ``extra`` takes the tensors it recognises
    first; the attention layers' KV cache scales (``self_attn.k_scale``…) set their fp8 cache's scales."""
    ignore_prefixes = ignore_prefixes + missing_prefixes(model)
    params = dict(model.named_parameters())
    expected = _checkpoint_names([p for p in params if extra is None or not extra.owns(p)], stacked)
    loaded: set[str] = set()
    kind = type(model).__name__
    kv_scales = KVScaleLoader(model)
    for name, tensor in weights:
        if name.endswith("rotary_emb.inv_freq") or name.startswith(ignore_prefixes):
            continue
        if extra is not None and extra.load(name, tensor):
            loaded.add(name)
            continue
        stack = next((s for s in stacked if f".{s.source}." in name), None)
        target = name.replace(f".{stack.source}.", f".{stack.fused}.") if stack else name
        param = params.get(target)
        if param is None and kv_scales.load(name, tensor):
            loaded.add(name)
            continue
        if param is None:
            raise ValueError(f"checkpoint tensor {name!r} matches no parameter of {kind}; the checkpoint is "
                             "for a different architecture or config")
        with torch.no_grad():
            if stack is not None:
                param.weight_loader(param, tensor, stack.shard_id)
            else:
                getattr(param, "weight_loader", _default_loader)(param, tensor)
        loaded.add(name)
    missing = sorted(expected - loaded) + (extra.missing() if extra is not None else [])
    if missing:
        raise ValueError(f"the checkpoint lacks {len(missing)} tensor(s) {kind} needs: {', '.join(missing[:10])}"
                         f"{' …' if len(missing) > 10 else ''}; the checkpoint is incomplete or for another config")
