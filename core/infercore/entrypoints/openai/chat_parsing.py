"""Reasoning and tool calls in chat replies: which parsers a request gets, and how one choice's text
becomes reasoning, content and tool calls, whole or streamed.

The reasoning parser (``--reasoning-parser``) reads the text first; the content it leaves goes to the
tool parser, which is the server's ``--tool-call-parser`` for ``tool_choice`` ``auto``, or a parser
of the constrained JSON for ``required`` and a named function (the engine starts that constraint
once reasoning has ended). Parsers never fail a request: one that breaks hands its text back as
content. A reply cut by the length limit inside a tool call keeps the call, with its arguments as far
as they got.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from infercore.config import ServeConfig
from infercore.entrypoints.openai.errors import APIError
from infercore.entrypoints.openai.protocol import ChatCompletionRequest, DeltaMessage, DeltaToolCall, ToolCall
from infercore.entrypoints.openai.tool_choice_parsers import NamedFunctionParser, RequiredCallsParser
from infercore.parsers import DeltaMessage as ParsedDelta
from infercore.parsers import ReasoningParser, ToolParser, ToolRequest, get_reasoning_parser, get_tool_parser
from infercore.parsers.lookup import check_parser_flags
from infercore.plugins import get_plugin_manager
from infercore.sampling_params import StructuredOutputsParams
from infercore.structured_output.request import tool_choice_params


def is_constrained(req: ChatCompletionRequest) -> bool:
    """Whether the request's tool choice is enforced by a grammar (``required`` or a named function)."""
    return req.tool_choice is not None and req.tool_choice not in ("none", "auto")


def tool_choice_constraint(req: ChatCompletionRequest) -> StructuredOutputsParams | None:
    """The grammar a ``required`` or named tool choice imposes; 400 when it can't be served."""
    if not is_constrained(req):
        return None
    if not get_plugin_manager().registry("structured_output_backend").names():
        raise APIError(400, "tool_choice 'required' or a named function is enforced by constrained decoding, "
                       "which needs a grammar backend; install infercore-structured-output", "tool_choice")
    try:
        return tool_choice_params(req.tool_choice, req.tools)
    except ValueError as exc:
        raise APIError(400, str(exc), "tool_choice") from None


@dataclass
class ParsedMessage:
    """A whole reply, split: reasoning, content and tool calls."""

    reasoning: str | None
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)


class ChoiceParser:
    """Parses the text of one choice; make one per choice (streaming is stateful)."""

    def __init__(self, reasoning: ReasoningParser | None, tools: ToolParser | None, request: ToolRequest,
                 include_reasoning: bool, parallel_tool_calls: bool) -> None:
        self.reasoning = reasoning
        self.tools = tools
        self.request = request
        self.include_reasoning = include_reasoning
        self.parallel_tool_calls = parallel_tool_calls
        self.tools_called = False

    @property
    def active(self) -> bool:
        """Whether any parser reads this choice (then its text is decoded with special tokens kept)."""
        return self.reasoning is not None or self.tools is not None

    def finish_reason(self, engine_reason: str | None) -> str | None:
        """``tool_calls`` for a reply that ended normally after calling tools; else the engine's reason."""
        return "tool_calls" if self.tools_called and engine_reason == "stop" else engine_reason

    def parse(self, text: str, truncated: bool = False) -> ParsedMessage:
        """Split a whole reply (``truncated``: it was cut by the length limit)."""
        reasoning, content = None, text
        if self.reasoning is not None:
            reasoning, content = self.reasoning.extract_reasoning(text)
        calls: list[ToolCall] = []
        if self.tools is not None and content:
            extracted = self.tools.extract_tool_calls(content, self.request, truncated=truncated)
            if extracted.tools_called:
                calls = [ToolCall.model_validate(msgspec.to_builtins(c)) for c in extracted.tool_calls]
                calls = calls if self.parallel_tool_calls else calls[:1]
                content = extracted.content
        self.tools_called = bool(calls)
        return ParsedMessage(reasoning if self.include_reasoning else None, content or None, calls)

    def feed(self, text: str, token_ids: list[int]) -> DeltaMessage | None:
        """What a new piece of streamed text adds; None when nothing is ready to send."""
        if not self.active:
            return DeltaMessage(content=text) if text else None
        if self.reasoning is None:
            return self._tool_step(None, text, token_ids)
        step = self.reasoning.extract_reasoning_streaming(text, token_ids)
        if step is None:
            return None
        return self._tool_step(step.reasoning, step.content, token_ids)

    def finish(self, truncated: bool = False) -> DeltaMessage | None:
        """Whatever the parsers still held back, at the end of the stream (``truncated``: it was cut by
        the length limit)."""
        reasoning, content = None, None
        if self.reasoning is not None:
            step = self.reasoning.flush()
            if step is not None:
                reasoning, content = step.reasoning, step.content
        if self.tools is None:
            return self._delta(reasoning, content, [])
        fed = self._tool_step(reasoning, content, [])
        tail = self._delta(None, *self._tool_parts(self.tools.flush(self.request, truncated=truncated)))
        return _joined(fed, tail)

    def _tool_step(self, reasoning: str | None, content: str | None, token_ids: list[int]) -> DeltaMessage | None:
        if self.tools is None or not content:
            return self._delta(reasoning, content, [])
        step = self.tools.extract_tool_calls_streaming(content, token_ids, self.request)
        return self._delta(reasoning, *self._tool_parts(step))

    def _tool_parts(self, step: ParsedDelta | None) -> tuple[str | None, list[DeltaToolCall]]:
        if step is None:
            return None, []
        calls = [DeltaToolCall.model_validate(msgspec.to_builtins(c)) for c in step.tool_calls
                 if self.parallel_tool_calls or c.index == 0]
        self.tools_called = self.tools_called or bool(calls)
        return step.content, calls

    def _delta(self, reasoning: str | None, content: str | None, calls: list[DeltaToolCall]) -> DeltaMessage | None:
        if not self.include_reasoning:
            reasoning = None
        if not reasoning and not content and not calls:
            return None
        return DeltaMessage(reasoning=reasoning or None, reasoning_content=reasoning or None,
                            content=content or None, tool_calls=calls or None)


def _joined(first: DeltaMessage | None, second: DeltaMessage | None) -> DeltaMessage | None:
    """Two deltas of one stream as one (text joined, tool-call fragments in order)."""
    if first is None or second is None:
        return first or second
    reasoning = (first.reasoning or "") + (second.reasoning or "")
    calls = (first.tool_calls or []) + (second.tool_calls or [])
    return DeltaMessage(reasoning=reasoning or None, reasoning_content=reasoning or None,
                        content=((first.content or "") + (second.content or "")) or None, tool_calls=calls or None)


class ChatParsers:
    """The server's parser settings; :meth:`for_request` makes the parsers of one choice."""

    def __init__(self, serve: ServeConfig, tokenizer: Any | None) -> None:
        check_parser_flags(serve)
        self.tool_call_parser = serve.tool_call_parser
        self.reasoning_parser = serve.reasoning_parser
        self.tokenizer = tokenizer

    def parses(self, req: ChatCompletionRequest) -> bool:
        """Whether any parser reads the replies to ``req``."""
        return bool(self.reasoning_parser) or self._tool_parser(req) is not None

    def for_request(self, req: ChatCompletionRequest) -> ChoiceParser:
        """A new parser for one choice of ``req``."""
        tools = self._tool_parser(req)
        reasoning = None
        if self.reasoning_parser:
            reasoning = get_reasoning_parser(self.reasoning_parser, self.tokenizer, **(req.chat_template_kwargs or {}))
        request = ToolRequest(tools=[t.model_dump(exclude_none=True) for t in req.tools or []],
                              tool_choice=_dumped(req.tool_choice))
        return ChoiceParser(reasoning, tools, request, req.include_reasoning, req.parallel_tool_calls is not False)

    def _tool_parser(self, req: ChatCompletionRequest) -> ToolParser | None:
        if not req.tools or req.tool_choice == "none":
            return None
        if req.tool_choice == "required":
            return RequiredCallsParser(self.tokenizer)
        if is_constrained(req):
            return NamedFunctionParser(self.tokenizer, function=req.tool_choice.function.name)
        return get_tool_parser(self.tool_call_parser, self.tokenizer) if self.tool_call_parser else None


def _dumped(choice: Any) -> str | dict[str, Any] | None:
    dump = getattr(choice, "model_dump", None)
    return dump() if callable(dump) else choice
