"""Reasoning in ``<think>…</think>``: DeepSeek-R1, Qwen3 and GLM-4.5."""

from __future__ import annotations

from infercore.plugin_api import MarkerReasoningParser


class DeepSeekR1ReasoningParser(MarkerReasoningParser):
    """DeepSeek-R1 always thinks; its template may already have opened ``<think>``."""

    implicit_start = True
    honors_enable_thinking = False


class Qwen3ReasoningParser(MarkerReasoningParser):
    """Qwen3 thinks unless ``enable_thinking=False``; the template may have opened ``<think>``."""

    implicit_start = True


class Glm45ReasoningParser(MarkerReasoningParser):
    """GLM-4.5 writes ``<think>`` itself when it thinks; output without it is all content."""
