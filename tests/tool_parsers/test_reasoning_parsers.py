"""Reasoning formats: whole-output splits, streaming split invariance, thinking switched off."""

from __future__ import annotations

from typing import Any

import pytest

from infercore.parsers import get_reasoning_parser
from tool_parsers.streaming import Detokenized, Piece, Streamed

GRANITE_THINK, GRANITE_ANSWER = "Here is my thought process:", "Here is my response:"

CASES: list[tuple[str, str, str | None, str | None]] = [
    # (parser, output, reasoning, content)
    ("deepseek_r1", "<think>Two and two.\n</think>\n\nThe answer is 4.", "Two and two.\n", "The answer is 4."),
    ("deepseek_r1", "Opened by the template.</think>Yes.", "Opened by the template.", "Yes."),
    ("deepseek_r1", "Still thinking when the output ended", "Still thinking when the output ended", None),
    ("deepseek_r1", "<think>héllo 世界 😀 <b>not a marker</b></think>Fin.", "héllo 世界 😀 <b>not a marker</b>", "Fin."),
    ("qwen3", "<think>\nLet me see.\n</think>\n\nParis.", "\nLet me see.\n", "Paris."),
    ("qwen3", "Let me see.</think>Paris.", "Let me see.", "Paris."),
    ("qwen3", "<think></think>Paris.", None, "Paris."),
    ("glm45", "<think>Check the map.</think>Paris.", "Check the map.", "Paris."),
    ("glm45", "Paris, without thinking.", None, "Paris, without thinking."),
    ("glm45", "  <think>x</think>", "x", None),
    ("granite", f"{GRANITE_THINK} weigh it. {GRANITE_ANSWER} Paris.", " weigh it. ", "Paris."),
    ("granite", "Here's my thought process: hmm. Here's my response: ok", " hmm. ", "ok"),
    ("granite", "Here is the answer: Paris.", None, "Here is the answer: Paris."),
    ("granite", f"{GRANITE_THINK} no answer yet", " no answer yet", None),
]


def _stream(name: str, pieces: list[Piece], **kwargs: Any) -> Streamed:
    parser = get_reasoning_parser(name, None, **kwargs)
    streamed = Streamed()
    for text, ids in pieces:
        streamed.add(parser.extract_reasoning_streaming(text, ids))
    streamed.add(parser.flush())
    assert not streamed.calls
    return streamed


@pytest.mark.parametrize(("name", "text", "reasoning", "content"), CASES)
def test_whole_output(name: str, text: str, reasoning: str | None, content: str | None) -> None:
    assert get_reasoning_parser(name).extract_reasoning(text) == (reasoning, content)


@pytest.mark.parametrize(("name", "text", "reasoning", "content"), CASES)
def test_streaming_equals_whole_output(name: str, text: str, reasoning: str | None, content: str | None,
                                       tokenizer: Any) -> None:
    detok = Detokenized(tokenizer, text)
    groupings = [list(detok.token_by_token()), [(c, []) for c in text], *detok.random_groupings(100)]
    for i, pieces in enumerate(groupings):
        streamed = _stream(name, pieces)
        assert (streamed.reasoning, streamed.content) == (reasoning or "", content or ""), f"grouping {i}"


def test_qwen3_without_thinking_is_all_content(tokenizer: Any) -> None:
    text = "No thinking here, even with </think> in the text."
    parser = get_reasoning_parser("qwen3", tokenizer, enable_thinking=False)
    assert parser.extract_reasoning(text) == (None, text)
    assert parser.is_reasoning_end([])
    streamed = _stream("qwen3", list(Detokenized(tokenizer, text).token_by_token()), enable_thinking=False)
    assert (streamed.reasoning, streamed.content) == ("", text)


def test_deepseek_r1_always_thinks() -> None:
    parser = get_reasoning_parser("deepseek_r1", None, enable_thinking=False)
    assert parser.extract_reasoning("a</think>b") == ("a", "b")


@pytest.mark.parametrize(("name", "text", "ended"), [
    ("qwen3", "<think>abc</think>", True),
    ("qwen3", "<think>abc", False),
    ("qwen3", "<think>a</think>b<|im_end|><think>c", False),
    ("deepseek_r1", "abc</think>d", True),
    ("granite", f"{GRANITE_THINK} a {GRANITE_ANSWER}", True),
    ("granite", f"{GRANITE_THINK} a", False),
])
def test_is_reasoning_end(name: str, text: str, ended: bool, tokenizer: Any) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert get_reasoning_parser(name, tokenizer).is_reasoning_end(ids) is ended
