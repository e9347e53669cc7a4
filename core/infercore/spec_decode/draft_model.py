"""The draft-model proposer (``method: draft_model``): a smaller model of the same tokenizer drafts.

Any architecture infercore runs can draft (the target itself included: "self-draft", every draft
accepted under greedy decoding). Its KV cache lives in the target's block tables
(:mod:`infercore.worker.draft_runner`) and the steps are :class:`ModelProposer`'s: a catch-up pass
over the step's settled tokens, then one-token steps. ``draft_tensor_parallel_size`` 1 under a
tensor-parallel target keeps a whole draft on every rank (no collective in the draft's steps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from infercore.spec_decode.draft_parallel import position_overrides, replace_model, tensor_parallel_size
from infercore.spec_decode.model_proposer import ModelProposer

if TYPE_CHECKING:
    from infercore.spec_decode.model_proposer import MakeRunner
    from infercore.worker.model_runner import ModelRunner


class DraftModelProposer(ModelProposer):
    """Drafts with ``speculative_config.model``, a causal LM sharing the target's tokenizer."""

    def bind(self, target: ModelRunner, make_runner: MakeRunner) -> None:
        """Load the draft model (weights as the target's load format says) and its KV cache's runner."""
        from infercore.models.loader import get_hf_config, load_model

        config = replace_model(target.config, self.spec.config.model or "")
        overrides = position_overrides(get_hf_config(config.model).get_text_config(), target.max_model_len)
        if overrides:
            config = replace_model(target.config, self.spec.config.model or "", overrides)
        draft_tp = self.spec.config.draft_tensor_parallel_size
        with tensor_parallel_size(draft_tp):
            model = load_model(config, target.device, target.dtype)
        text = get_hf_config(config.model).get_text_config()
        self.draft_vocab, self.hidden_size = int(text.vocab_size), int(text.hidden_size)
        self.runner = make_runner(model, draft_tp)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, target_rows: torch.Tensor,
                last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The draft model over the tokens; its argmax (within the shared vocabulary) at ``last``."""
        out = self.runner.model(input_ids.clamp_max(self.draft_vocab - 1), positions).index_select(0, last)
        return out, self._argmax(out)

    def decode(self, input_ids: torch.Tensor, positions: torch.Tensor,
               hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One token per row (``hidden`` unused: the draft's KV cache carries its state)."""
        out = self.runner.model(input_ids.clamp_max(self.draft_vocab - 1), positions)
        return out, self._argmax(out)

    def _argmax(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.runner.model.compute_logits(hidden)
        return logits[:, : min(self.draft_vocab, self.spec.vocab_size)].argmax(dim=-1)
