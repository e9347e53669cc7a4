"""The EAGLE proposers (``method: eagle`` and ``eagle3``): a one-layer head on the target's hidden states.

The target's hidden states are captured while it runs, by hooks on its decoder layers that copy into
a buffer of the step's size: EAGLE-3 takes the residual stream entering three layers (low, mid, high:
``eagle_aux_hidden_state_layer_ids`` in the head's config, else layers 2, L/2 and L-3), concatenated;
EAGLE-1 the final normed state. The copies are part of the step, so captured graphs replay them.
The head (:mod:`infercore.spec_decode.eagle_head`) keeps a one-layer KV cache in the target's block
tables; :class:`ModelProposer` runs its catch-up (position ``p`` fed the token at ``p + 1`` and the
target's states at ``p``) and its one-token steps (fed the previous draft and the head's own output).

Targets: the families built on infercore's Llama decoder (Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE,
Mixtral, Phi-3, Gemma 3); the public heads exist for Llama 3.x and Qwen3.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from infercore.spec_decode.draft_parallel import position_overrides, replace_model, tensor_parallel_size
from infercore.spec_decode.eagle_head import EagleHead, default_aux_layers
from infercore.spec_decode.model_proposer import ModelProposer, load_weights_into

if TYPE_CHECKING:
    from infercore.spec_decode.model_proposer import MakeRunner
    from infercore.worker.model_runner import ModelRunner


class HiddenCapture:
    """Copies of the target's hidden states at chosen layers, written during every forward pass."""

    def __init__(self, model: nn.Module, layers: tuple[int, ...] | None, max_tokens: int, hidden_size: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        decoder = model.model
        count = len(layers) if layers is not None else 1
        self.buffer = torch.zeros((max_tokens, count * hidden_size), dtype=dtype, device=device)
        self.handles: list[Any] = []
        if layers is None:
            self.handles.append(decoder.norm.register_forward_hook(self._after_norm))
            return
        for slot, index in enumerate(layers):
            self.handles.append(decoder.layers[index].register_forward_pre_hook(self._entering(slot, hidden_size)))

    def _entering(self, slot: int, size: int) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            _, hidden, residual = args[:3]
            stream = hidden if residual is None else hidden + residual
            self.buffer[: stream.shape[0], slot * size: (slot + 1) * size].copy_(stream)
        return hook

    def _after_norm(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        normed = output[0] if isinstance(output, tuple) else output
        self.buffer[: normed.shape[0]].copy_(normed)


class EagleProposer(ModelProposer):
    """EAGLE-3 (``eagle3 = True``) or EAGLE-1 drafts from ``speculative_config.model``, a head folder."""

    input_shift = 1
    lazy_catch_up = False
    writes_kv_alone = True
    eagle3 = False

    def bind(self, target: ModelRunner, make_runner: MakeRunner) -> None:
        """Build the head (random weights with ``load_format="dummy"``), hook the target's layers."""
        from infercore.models.contract import ModelSpec
        from infercore.models.hf_config import get_hf_config, resolve_model_path
        from infercore.models.loader import build_model, init_dummy_weights

        config = replace_model(target.config, self.spec.config.model or "")
        head_config = get_hf_config(config.model)
        for key, value in (position_overrides(head_config, target.max_model_len) or {}).items():
            setattr(head_config, key, value)
        if not self.eagle3 and target.config.parallel.tensor_parallel_size > 1:
            raise ValueError("an EAGLE-1 head drafts through the target's LM head, which is split over the "
                             "tensor-parallel ranks; use an EAGLE-3 head (its own LM head) or tensor_parallel_size 1")
        text = target.hf_config.get_text_config()
        num_layers = int(text.num_hidden_layers)
        layers = None
        if self.eagle3:
            ids = getattr(head_config, "eagle_aux_hidden_state_layer_ids", None)
            layers = tuple(int(i) for i in ids) if ids else default_aux_layers(num_layers)
        num_aux = len(layers) if layers is not None else 1
        if int(head_config.hidden_size) != int(text.hidden_size) and not self.eagle3:
            raise ValueError(f"the EAGLE head's hidden size {head_config.hidden_size} differs from the target's "
                             f"{text.hidden_size}")
        draft_tp = 1  # the head is small: whole on every rank
        with tensor_parallel_size(draft_tp):
            spec = ModelSpec(hf_config=head_config, dtype=target.dtype, device=target.device)
            windows = [g.window for g in target.kv_setup.groups]
            window = None if None in windows else windows[0]  # the head reads what some target layer reads
            head = build_model(_HeadFactory(self.eagle3, int(text.hidden_size), num_aux, window), spec)
            if config.load.load_format == "dummy":
                init_dummy_weights(head, config.model.seed)
            else:
                folder = resolve_model_path(config.model, config.load.download_dir)
                load_weights_into(head, str(Path(folder)), config.load.load_format)
        if not head.has_own_embedding:
            embed = target.model.model.embed_tokens
            if target.config.parallel.tensor_parallel_size > 1:
                raise ValueError("this EAGLE head has no embed_tokens and the target's is split over ranks; "
                                 "use a head checkpoint that carries embed_tokens.weight")
            head.embed_tokens = embed
        self.head = head.eval()
        self.hidden_size = int(head_config.hidden_size)
        self.target_logits = target.model.compute_logits
        max_tokens = max(target.max_num_tokens, target.max_num_reqs)
        self.capture = HiddenCapture(target.model, layers, max_tokens, int(text.hidden_size), target.dtype,
                                     target.device)
        self.runner = make_runner(head, draft_tp)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, target_rows: torch.Tensor,
                last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The head over the tokens with ``h`` from the target's captured states at ``target_rows``."""
        ids, hidden = self._catch_up_inputs(input_ids, target_rows)
        out = self.head(ids, positions, hidden).index_select(0, last)
        return out, self.head.draft_tokens(out, self.target_logits)

    def write_kv(self, input_ids: torch.Tensor, positions: torch.Tensor, target_rows: torch.Tensor) -> None:
        """A catch-up that drafts nothing: the head's K/V entries of the tokens, without its output."""
        ids, hidden = self._catch_up_inputs(input_ids, target_rows)
        self.head.write_kv(ids, positions, hidden)

    def _catch_up_inputs(self, input_ids: torch.Tensor, target_rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A catch-up's token ids within the head's vocabulary, and ``h`` from the target's captured states."""
        head = self.head
        return input_ids.clamp_max(head.vocab_size - 1), head.combine(self.capture.buffer.index_select(0, target_rows))

    def decode(self, input_ids: torch.Tensor, positions: torch.Tensor,
               hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One token per row, fed the head's own output of the step before."""
        head = self.head
        out = head(input_ids.clamp_max(head.vocab_size - 1), positions, hidden)
        return out, head.draft_tokens(out, self.target_logits)


class Eagle3Proposer(EagleProposer):
    """EAGLE-3: three target layers' states, concatenated and projected by the head's ``fc``."""

    eagle3 = True


class _HeadFactory:
    """``build_model``'s class argument for an :class:`EagleHead` of this target."""

    def __init__(self, eagle3: bool, target_hidden: int, num_aux: int, window: int | None) -> None:
        self.eagle3, self.target_hidden, self.num_aux, self.window = eagle3, target_hidden, num_aux, window

    def __call__(self, hf_config: Any, dtype: torch.dtype) -> EagleHead:
        return EagleHead(hf_config, dtype, eagle3=self.eagle3, target_hidden=self.target_hidden,
                         num_aux=self.num_aux, window=self.window)
