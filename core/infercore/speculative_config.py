"""``SpeculativeConfig``: how drafts are proposed, with vLLM's keys, checked where the value enters.

Given as ``speculative_config={...}`` to ``LLM`` and the engine arguments, as ``--speculative-config JSON``
on the command line, or as ``INFERCORE_SPECULATIVE_CONFIG``. The method names a proposer registered
through the ``register_speculative_methods`` hook; vLLM's model-based methods (``draft_model``,
``eagle``, ``eagle3``, ``mtp``) are known names even before a proposer for them is registered.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: vLLM's method names and whether each needs a draft model (``model``).
KNOWN_METHODS: dict[str, bool] = {
    "ngram": False,
    "draft_model": True,
    "eagle": True,
    "eagle3": True,
    "mtp": True,
}


#: Speculation is off in steps with this many running requests unless the configuration says otherwise:
#: there the verify pass is no longer bound by reading the weights, so rejected drafts cost real compute.
DEFAULT_DISABLE_BY_BATCH_SIZE = 32

#: A request pauses drafting while its drafts average fewer accepted tokens per verifying step than this
#: (:mod:`infercore.scheduler.draft_backoff`): a verifying step costs about 1.2-1.35 plain steps at batch 1
#: on a GPU, so below about a quarter of a token it loses.
DEFAULT_DISABLE_BY_ACCEPTANCE = 0.25

#: Why ``mtp`` has no in-tree proposer.
MTP_REFUSAL = ("speculative method 'mtp' drafts with the multi-token-prediction layers a checkpoint carries; none of "
               "the families infercore runs (Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, Mixtral, Phi-3, Gemma 3) has "
               "them (DeepSeek-V3, MiMo and GLM-4.5 do, and infercore does not run those), so no in-tree proposer "
               "serves it; use 'eagle3' or 'draft_model', or register an 'mtp' proposer through "
               "register_speculative_methods")


class SpeculativeConfig(BaseModel):
    """Which proposer guesses draft tokens, how many per step, and when speculation is off."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: str = Field(description="proposer: ngram, draft_model, eagle, eagle3, mtp or a plugin's method")
    model: str | None = Field(None, description="draft model (repo id or folder) for the model-based methods")
    num_speculative_tokens: int = Field(description="draft tokens proposed per request and step (k)")
    prompt_lookup_min: int | None = Field(None, description="ngram: shortest suffix matched (default 1)")
    prompt_lookup_max: int | None = Field(None, description="ngram: longest suffix matched (default 3)")
    draft_tensor_parallel_size: int | None = Field(
        None, description="devices the draft model is split over (default: the target's)")
    disable_by_batch_size: int | None = Field(
        DEFAULT_DISABLE_BY_BATCH_SIZE, description="no drafts in steps with at least this many running requests "
        f"(default {DEFAULT_DISABLE_BY_BATCH_SIZE}; null: never off)")
    disable_by_acceptance: float | None = Field(
        DEFAULT_DISABLE_BY_ACCEPTANCE, description="a request whose last 8 verifying steps accepted fewer drafts "
        "per step than this pauses drafting for 16 steps, then probes 4 steps; each failing probe doubles the pause "
        f"(default {DEFAULT_DISABLE_BY_ACCEPTANCE}; null: always draft)")

    @model_validator(mode="before")
    @classmethod
    def _parse_json(cls, data: Any) -> Any:
        """Accept the JSON text the command line and the environment variable carry."""
        if isinstance(data, (str, bytes)):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as exc:
                raise ValueError(f"speculative_config is not valid JSON ({exc}); pass an object such as "
                                 '{"method": "ngram", "num_speculative_tokens": 3}') from None
        return data

    @field_validator("method")
    @classmethod
    def _known_method(cls, method: str) -> str:
        if method in KNOWN_METHODS or method in _registry():
            return method
        raise ValueError(f"unknown speculative method {method!r}; choose one of {', '.join(sorted(known_methods()))} "
                         "(a plugin adds others through register_speculative_methods)")

    @field_validator("num_speculative_tokens")
    @classmethod
    def _positive_k(cls, k: int) -> int:
        if k < 1:
            raise ValueError(f"num_speculative_tokens must be at least 1 (got {k}); leave speculative_config "
                             "out to decode without drafts")
        return k

    @field_validator("prompt_lookup_min", "prompt_lookup_max", "draft_tensor_parallel_size",
                     "disable_by_batch_size")
    @classmethod
    def _positive(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"must be at least 1 (got {value})")
        return value

    @field_validator("disable_by_acceptance")
    @classmethod
    def _non_negative(cls, value: float | None) -> float | None:
        if value is not None and not 0 <= value < float("inf"):
            raise ValueError(f"must be a number of accepted drafts per step, at least 0 (got {value}); null turns "
                             "the pausing off")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeConfig:
        if self.method == "ngram":
            low, high = self.lookup_range
            if low > high:
                raise ValueError(f"prompt_lookup_min ({low}) is larger than prompt_lookup_max ({high}); "
                                 "the shortest suffix matched cannot be longer than the longest")
        elif self.prompt_lookup_min is not None or self.prompt_lookup_max is not None:
            raise ValueError(f"prompt_lookup_min and prompt_lookup_max apply to method 'ngram', not "
                             f"{self.method!r}; leave them out")
        if self.method == "mtp" and "mtp" not in _registry():
            raise ValueError(MTP_REFUSAL)
        if self.disable_by_acceptance is not None and self.disable_by_acceptance > self.num_speculative_tokens:
            raise ValueError(f"disable_by_acceptance ({self.disable_by_acceptance}) is more accepted drafts per step "
                             f"than the {self.num_speculative_tokens} drafted (num_speculative_tokens): every request "
                             "would pause; give at most num_speculative_tokens, or null to always draft")
        if method_needs_model(self.method) and not self.model:
            raise ValueError(f"speculative method {self.method!r} proposes with a draft model; give its repo id "
                             "or folder as speculative_config's 'model'")
        return self

    @property
    def lookup_range(self) -> tuple[int, int]:
        """``(prompt_lookup_min, prompt_lookup_max)`` with the defaults filled in (1 and 3, at least min)."""
        low = self.prompt_lookup_min if self.prompt_lookup_min is not None else 1
        high = self.prompt_lookup_max if self.prompt_lookup_max is not None else max(3, low)
        return low, high


def known_methods() -> set[str]:
    """vLLM's method names and every method a plugin registered."""
    return set(KNOWN_METHODS) | set(_registry().names())


def method_needs_model(method: str) -> bool:
    """Whether ``method`` proposes with a draft model: vLLM's table for its names, else the
    registration's ``needs_model`` metadata (False when it has none)."""
    if method in KNOWN_METHODS:
        return KNOWN_METHODS[method]
    return bool(_registry().get(method).metadata.get("needs_model", False))


def _registry() -> Any:
    # Imported here: the command line builds configurations without loading the plugins.
    from infercore.plugins.manager import get_plugin_manager

    return get_plugin_manager().registry("speculative_method")
