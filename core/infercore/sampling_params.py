"""SamplingParams: how one request is decoded. Field names and meanings follow vLLM's."""

from __future__ import annotations

import math
from typing import Any

import msgspec

from infercore.pooling_params import PoolingParams
from infercore.regex_safety import MAX_REGEX_CHARS, nested_unbounded_repeat

_MAX_N = 128
_MAX_LOGIT_BIAS = 4096
_MAX_STOP = 64


class SamplingParamsError(ValueError):
    """A sampling parameter is out of range; the message names the parameter and the allowed range."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class StructuredOutputsParams(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A decoding constraint: exactly one of ``json``, ``regex``, ``choice``, ``grammar``, ``json_object``."""

    json: str | dict[str, Any] | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    #: Set by the server from the request's structural tag / tool choice; informational.
    backend: str | None = None

    def __post_init__(self) -> None:
        given = [k for k in ("json", "regex", "choice", "grammar", "json_object") if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise SamplingParamsError(
                "structured_outputs needs exactly one of json, regex, choice, grammar, json_object "
                f"(got {', '.join(given) or 'none'})", "structured_outputs")
        if self.choice is not None and not self.choice:
            raise SamplingParamsError("structured_outputs.choice must list at least one string", "structured_outputs")
        if isinstance(self.regex, str) and len(self.regex) > MAX_REGEX_CHARS:
            raise SamplingParamsError(f"the regex constraint has {len(self.regex)} characters; at most {MAX_REGEX_CHARS} "
                                      "are allowed, so send a shorter one", "structured_outputs")
        if self.regex is not None and nested_unbounded_repeat(self.regex):
            raise SamplingParamsError(
                "the regex repeats an unbounded repetition (like (a+)+), which can take exponential time to "
                "match; write it without the nesting (for example a+ instead of (a+)+)", "structured_outputs")

    @property
    def kind(self) -> str:
        for k in ("json", "regex", "choice", "grammar", "json_object"):
            if getattr(self, k) not in (None, False):
                return k
        raise AssertionError("validated in __post_init__")


class SamplingParams(msgspec.Struct, omit_defaults=True, kw_only=True):
    """Sampling parameters of one request.

    temperature 0 means greedy. ``max_tokens=None`` means "up to max_model_len"; ``max_tokens=0`` runs the
    prompt only (for its ``prompt_logprobs``) and generates nothing.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    detokenize: bool = True
    structured_outputs: StructuredOutputsParams | None = None
    #: Token ids that end generation besides EOS (set by the engine from the generation config).
    all_stop_token_ids: list[int] | None = None
    #: A pooling request (infercore.pooling): its prompt is pooled into a result instead of sampled.
    pooling_params: PoolingParams | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.top_k is None:
            self.top_k = 0
        self._validate()

    def _validate(self) -> None:
        def fail(msg: str, param: str) -> None:
            raise SamplingParamsError(msg, param)

        def finite(x: float, name: str) -> None:
            if not isinstance(x, (int, float)) or not math.isfinite(x):
                fail(f"{name} must be a finite number, got {x!r}", name)

        if not (1 <= self.n <= _MAX_N):
            fail(f"n must be between 1 and {_MAX_N}, got {self.n}", "n")
        finite(self.temperature, "temperature")
        if self.temperature < 0:
            fail(f"temperature must be >= 0, got {self.temperature}", "temperature")
        finite(self.top_p, "top_p")
        if not (0 < self.top_p <= 1):
            fail(f"top_p must be in (0, 1], got {self.top_p}", "top_p")
        if self.top_k < -1:
            fail(f"top_k must be -1 or 0 (disabled) or a positive integer, got {self.top_k}", "top_k")
        finite(self.min_p, "min_p")
        if not (0 <= self.min_p <= 1):
            fail(f"min_p must be in [0, 1], got {self.min_p}", "min_p")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            finite(value, name)
            if not (-2 <= value <= 2):
                fail(f"{name} must be in [-2, 2], got {value}", name)
        finite(self.repetition_penalty, "repetition_penalty")
        if not (0 < self.repetition_penalty <= 2):
            fail(f"repetition_penalty must be in (0, 2], got {self.repetition_penalty}", "repetition_penalty")
        if self.max_tokens is not None and self.max_tokens < 0:
            fail(f"max_tokens must be at least 0 (0 computes the prompt and its prompt_logprobs and generates "
                 f"nothing), got {self.max_tokens}", "max_tokens")
        if self.min_tokens < 0:
            fail(f"min_tokens must be >= 0, got {self.min_tokens}", "min_tokens")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            fail(f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})", "min_tokens")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and value < -1:
                fail(f"{name} must be >= 0 (or -1 for the whole vocabulary), got {value}", name)
        if self.stop is not None:
            if len(self.stop) > _MAX_STOP:
                fail(f"at most {_MAX_STOP} stop strings are allowed, got {len(self.stop)}", "stop")
            if any(not isinstance(s, str) or s == "" for s in self.stop):
                fail("stop strings must be non-empty strings", "stop")
        if self.stop_token_ids is not None and any(t < 0 for t in self.stop_token_ids):
            fail("stop_token_ids must be non-negative token ids", "stop_token_ids")
        if self.logit_bias is not None:
            if len(self.logit_bias) > _MAX_LOGIT_BIAS:
                fail(f"logit_bias may hold at most {_MAX_LOGIT_BIAS} entries, got {len(self.logit_bias)}", "logit_bias")
            for tok, bias in self.logit_bias.items():
                finite(bias, "logit_bias")
                if int(tok) < 0 or not (-100 <= bias <= 100):
                    fail(f"logit_bias maps token ids >= 0 to values in [-100, 100], got {tok}: {bias}", "logit_bias")

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5

    def validate_for_model(self, vocab_size: int, max_logprobs: int) -> None:
        """Checks that need the model: token ids in the vocabulary and the logprobs limit."""
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and value > max_logprobs:
                raise SamplingParamsError(
                    f"{name}={value} exceeds the server's limit of {max_logprobs}; ask for fewer "
                    "or raise --max-logprobs", name)
        for name, ids in (("logit_bias", list(self.logit_bias or {})), ("stop_token_ids", self.stop_token_ids or [])):
            bad = [int(t) for t in ids if int(t) >= vocab_size]
            if bad:
                raise SamplingParamsError(
                    f"{name} names token id {bad[0]}, outside the vocabulary of {vocab_size} tokens", name)

    def clone(self, **changes: Any) -> SamplingParams:
        return msgspec.structs.replace(self, **changes)
