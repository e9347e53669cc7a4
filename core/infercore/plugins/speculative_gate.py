"""Refuse a speculative configuration until the scheduler and the model runner carry drafts.

The proposers and the rejection sampler exist; the step does not yet schedule draft tokens, verify
``k + 1`` positions per row or roll rejected tokens back. An engine that silently decoded without
drafts would hide that, so core's ``configure`` hook stops it at start-up with this sentence instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infercore.config import InfercoreConfig


class SpeculativeDecodingUnavailable(ValueError):
    """The engine was asked to speculate before speculative decoding is wired into the step."""


def refuse_until_wired(config: InfercoreConfig) -> None:
    """Raise :class:`SpeculativeDecodingUnavailable` when ``config`` asks for speculative decoding."""
    spec = config.speculative.speculative_config
    if spec is None:
        return
    raise SpeculativeDecodingUnavailable(
        f"speculative decoding is not wired into the engine yet: speculative_config={spec.model_dump_json()} "
        "cannot run. Its proposers and rejection sampler exist, but the scheduler and model runner do not "
        "carry draft tokens; leave speculative_config out (--speculative-config) to serve without drafts")
