"""Fake engine outputs for front-end tests."""

from __future__ import annotations

from infercore.frontend.input_processor import InputProcessor
from infercore.wire.messages import EngineCoreOutput, FinishReason


def processor_for(tokenizer, max_model_len: int = 4096, max_logprobs: int = 20) -> InputProcessor:
    return InputProcessor(tokenizer, max_model_len=max_model_len, vocab_size=len(tokenizer),
                          max_logprobs=max_logprobs, eos_token_id=tokenizer.eos_token_id, generation_stop_ids=[])


def token_by_token(engine_id: str, ids: list[int], finish: FinishReason = FinishReason.LENGTH,
                   stop_reason: int | str | None = None) -> list[EngineCoreOutput]:
    """One EngineCoreOutput per token; the last one carries the finish."""
    outs = [EngineCoreOutput(engine_id, [t]) for t in ids]
    outs[-1] = EngineCoreOutput(engine_id, [ids[-1]], finish_reason=finish, stop_reason=stop_reason)
    return outs
