"""What the server tool-call and reasoning tests share: flags, tools, scripted replies, clients."""

from __future__ import annotations

import openai
from server.conftest import ServerProcess  # tests/ is on sys.path: its conftest has no package

#: Room for the tool definitions the chat template puts in the system prompt, and the reply.
TOOL_FLAGS = ["--max-model-len", "1024", "--cpu-threads", "1"]
#: The scripted model finds where its reply starts from prompts prefilled from position 0.
SCRIPTED_FLAGS = [*TOOL_FLAGS, "--no-enable-prefix-caching"]

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London"]}},
                   "required": ["city"], "additionalProperties": False}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "integer"}},
                                       "required": ["zone"], "additionalProperties": False}}}
HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def client_of(server: ServerProcess) -> openai.OpenAI:
    """The official client, pointed at ``server``."""
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def streamed(stream: openai.Stream) -> dict[int, dict]:
    """Per choice index: reasoning, content and tool calls gathered from a chat stream, the deltas of
    each tool call, and the finish reason."""
    choices: dict[int, dict] = {}
    for chunk in stream:
        for choice in chunk.choices:
            acc = choices.setdefault(choice.index, {"reasoning": "", "content": "", "calls": {}, "finish": None})
            delta = choice.delta
            extra = delta.model_extra or {}
            assert extra.get("reasoning") == extra.get("reasoning_content")  # two names, one text
            acc["reasoning"] += extra.get("reasoning_content") or ""
            acc["content"] += delta.content or ""
            for call in delta.tool_calls or []:
                acc["calls"].setdefault(call.index, []).append(call)
            if choice.finish_reason is not None:
                acc["finish"] = choice.finish_reason
    return choices
