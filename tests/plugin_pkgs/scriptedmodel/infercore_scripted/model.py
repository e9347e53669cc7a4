"""``ScriptedForCausalLM``: a test-only model that answers every prompt with one scripted reply.

Tests of the server's parsers need a model that writes an exact text (a tool call, a reasoning
block); random weights never do. This model runs Qwen3's layers as usual, then forces its logits
so that the reply is ``scripted_token_ids`` from its ``config.json``, followed by the EOS token.

How it knows where the reply stands: a prompt is a run of tokens starting at position 0, and the
reply begins at the position after the prompt's last token (an *anchor*). A later token at
position ``p`` is reply token ``p - anchor``, checked against the script so that the most recent
matching anchor wins. This holds for short prompts that are prefilled in one step, without prefix
caching (serve it with ``--no-enable-prefix-caching``), one request (any ``n``) at a time.
"""

from __future__ import annotations

import torch
from transformers import PretrainedConfig

from infercore.plugin_api import model_class

Qwen3ForCausalLM = model_class("Qwen3ForCausalLM")

#: Anchors kept: enough for the requests of one test module.
_MAX_ANCHORS = 64


class ScriptedForCausalLM(Qwen3ForCausalLM):
    """Test-only: Qwen3 whose every reply is the scripted token sequence of its config."""

    def __init__(self, hf_config: PretrainedConfig, dtype: torch.dtype) -> None:
        super().__init__(hf_config, dtype)
        self.script = [*hf_config.scripted_token_ids, hf_config.eos_token_id]
        self.anchors: list[int] = []

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Qwen3's hidden states, with column 0 replaced by each token's next script index."""
        hidden = super().forward(input_ids, positions).clone()
        steps = self._next_steps(input_ids.tolist(), positions.tolist())
        hidden[:, 0] = torch.tensor(steps, dtype=hidden.dtype, device=hidden.device)
        return hidden

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits that make the scripted token at each row's index the only likely one."""
        logits = super().compute_logits(hidden)
        index = hidden[:, 0].round().long().clamp(0, len(self.script) - 1)
        tokens = torch.tensor(self.script, device=hidden.device)[index]
        logits.fill_(-100.0)
        logits.scatter_(1, tokens[:, None], 100.0)
        return logits

    def _next_steps(self, ids: list[int], positions: list[int]) -> list[int]:
        steps = []
        in_prompt = False
        for i, (token, pos) in enumerate(zip(ids, positions, strict=True)):
            in_prompt = pos == 0 or (in_prompt and pos == positions[i - 1] + 1)
            if not in_prompt:
                steps.append(self._step_after(token, pos))
                continue
            steps.append(0)
            if i + 1 == len(ids) or positions[i + 1] != pos + 1:
                self.anchors = [a for a in self.anchors if a != pos + 1][-_MAX_ANCHORS + 1:] + [pos + 1]
        return steps

    def _step_after(self, token: int, pos: int) -> int:
        """The script index that follows ``token``, a reply token at ``pos``; the end when none fits."""
        for anchor in reversed(self.anchors):
            k = pos - anchor
            if 0 <= k < len(self.script) and self.script[k] == token:
                return k + 1
        return len(self.script) - 1
