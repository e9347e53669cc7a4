"""Results of tool-call and reasoning parsing, shaped like OpenAI's chat messages and deltas."""

from __future__ import annotations

from typing import Any

import msgspec


class FunctionCall(msgspec.Struct, kw_only=True):
    """A function call of a finished message; ``arguments`` is a JSON object as a string."""

    name: str
    arguments: str


class ToolCall(msgspec.Struct, kw_only=True):
    """One tool call of a finished message."""

    id: str
    type: str = "function"
    function: FunctionCall


class ExtractedToolCalls(msgspec.Struct, kw_only=True):
    """What a tool parser found in a whole model output."""

    tools_called: bool
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    content: str | None = None


class DeltaFunctionCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A fragment of a streamed function call: the whole name once, then argument fragments."""

    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A fragment of one streamed tool call. The first fragment of a call carries ``id``, ``type``
    and the function name; later ones only ``index`` and argument text."""

    index: int
    id: str | None = None
    type: str | None = None
    function: DeltaFunctionCall = msgspec.field(default_factory=DeltaFunctionCall)


class DeltaMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What one step of streaming adds to the assistant message."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[DeltaToolCall] = msgspec.field(default_factory=list)


class ToolRequest(msgspec.Struct, kw_only=True):
    """The parts of a chat request a tool parser needs; the server fills it from the request body."""

    tools: list[dict[str, Any]] = msgspec.field(default_factory=list)
    tool_choice: str | dict[str, Any] | None = "auto"

    def parameter_schema(self, function: str, parameter: str) -> dict[str, Any] | None:
        """The JSON schema of ``parameter`` of tool ``function``, or None when the request has none."""
        for tool in self.tools:
            spec = tool.get("function", tool)
            if isinstance(spec, dict) and spec.get("name") == function:
                properties = (spec.get("parameters") or {}).get("properties") or {}
                schema = properties.get(parameter)
                return schema if isinstance(schema, dict) else None
        return None
