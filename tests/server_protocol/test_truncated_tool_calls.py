"""A tool call cut by max_tokens (finish_reason "length") stays a tool call, streamed or not: its arguments
as far as they got, never sent again as content."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
from server.conftest import ServerProcess  # tests/ is on sys.path: its conftest has no package

from infercore.parsers import ToolRequest, get_tool_parser

ARGUMENTS = {"city": "Paris", "note": "bring an umbrella and a warm coat"}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": ' + json.dumps(ARGUMENTS) + "}\n</tool_call>"
#: The reply is cut inside the "note" string.
CUT_AT = CALL.index("umbrella")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "note": {"type": "string"}}}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> tuple[openai.OpenAI, int]:
    """A server whose model always writes CALL (hermes parser), and the max_tokens that cuts it at CUT_AT."""
    from infercore_scripted.folder import build_scripted_folder
    from transformers import AutoTokenizer

    folder: Path = build_scripted_folder(tmp_path_factory.mktemp("scripted") / "model", CALL)
    max_tokens = len(AutoTokenizer.from_pretrained(str(folder)).encode(CALL[:CUT_AT], add_special_tokens=False))
    server = ServerProcess(folder, tmp_path_factory.mktemp("scripted-logs"), [
        "--max-model-len", "1024", "--cpu-threads", "1", "--no-enable-prefix-caching", "--tool-call-parser",
        "hermes", "--enable-auto-tool-choice"])
    try:
        server.wait_ready()
        yield openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0), max_tokens
    finally:
        server.stop()


def _is_cut_arguments(arguments: str) -> bool:
    whole = json.dumps(ARGUMENTS)
    return whole.startswith(arguments) and '"note": "bring an' in arguments and arguments != whole


def test_whole_reply_keeps_the_cut_call(scripted) -> None:
    client, max_tokens = scripted
    result = client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, max_tokens=max_tokens)
    choice = result.choices[0]
    assert choice.finish_reason == "length" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and _is_cut_arguments(call.function.arguments)


def test_streamed_reply_never_resends_the_call_as_content(scripted) -> None:
    client, max_tokens = scripted
    content, arguments, names, finish = "", "", [], None
    for chunk in client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, max_tokens=max_tokens,
                                                stream=True):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                assert call.index == 0
                names += [call.function.name] if call.function and call.function.name else []
                arguments += (call.function.arguments or "") if call.function else ""
            finish = choice.finish_reason or finish
    assert content == "" and names == ["get_weather"] and finish == "length"
    assert _is_cut_arguments(arguments)


@pytest.mark.parametrize("cut", [CUT_AT, CALL.index('"city"') + 3])
def test_parser_keeps_a_cut_call_whole_and_streamed(cut: int) -> None:
    text, request = "Sure. " + CALL[:cut], ToolRequest(tools=[t["function"] for t in TOOLS])
    whole = get_tool_parser("hermes").extract_tool_calls(text, request, truncated=True)
    [call] = whole.tool_calls
    assert whole.tools_called and whole.content == "Sure." and call.function.name == "get_weather"
    parser = get_tool_parser("hermes")
    steps = [parser.extract_tool_calls_streaming(text[i:i + 5], [], request) for i in range(0, len(text), 5)]
    steps.append(parser.flush(request, truncated=True))
    content = "".join(s.content or "" for s in steps if s is not None)
    streamed = "".join(c.function.arguments or "" for s in steps if s is not None for c in s.tool_calls)
    assert content == "Sure." and streamed == call.function.arguments


def test_a_region_cut_before_its_call_is_named_is_content() -> None:
    text = "Sure. " + CALL[:CALL.index('"name"') + 4]
    whole = get_tool_parser("hermes").extract_tool_calls(text, ToolRequest(), truncated=True)
    assert not whole.tools_called and whole.content == text
