"""An exception inside one request's processing fails that request only: a tool parser plugin that
raises (in the API process) and a grammar matcher that raises while masking or accepting tokens (in the
engine process), each while other clients' streams run. The others finish whole, /health stays 200 and
the engine process is the same one."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import httpx
import pytest
from faulty_plugin import EXPLODE_ACCEPT, EXPLODE_MASK, EXPLODE_TOOL

HERE = Path(__file__).resolve().parent
NEIGHBOUR = {"model": "tiny", "prompt": "hello there", "max_tokens": 96, "ignore_eos": True, "temperature": 0,
             "stream": True, "stream_options": {"include_usage": True}}
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in (EXPLODE_TOOL, "harmless")]


def _plugin_path(tmp: Path) -> str:
    """A folder that makes the faulty plugin discoverable (an installed distribution's metadata)."""
    info = tmp / "infercore_faulty-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: infercore-faulty\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text("[infercore.plugins]\nfaulty = faulty_plugin\n")
    return os.pathsep.join(p for p in (str(tmp), str(HERE), os.environ.get("PYTHONPATH")) if p)


@pytest.fixture(scope="module")
def server(start, tmp_path_factory):
    env = {"PYTHONPATH": _plugin_path(tmp_path_factory.mktemp("faulty"))}
    return start(None, "--enable-auto-tool-choice", "--tool-call-parser", "faulty",
                 "--structured-outputs-backend", "faulty", env=env)


class Neighbour(threading.Thread):
    """Another client's streamed completion, read to the end."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.first_chunk = threading.Event()
        self.lines: list[str] = []

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url + "/v1/completions", json=NEIGHBOUR, timeout=300) as response:
                for line in response.iter_lines():
                    if line:
                        self.lines.append(line)
                        self.first_chunk.set()
        finally:
            self.first_chunk.set()

    def completion_tokens(self) -> int:
        """Tokens the stream reported in its usage chunk; fails when the stream broke."""
        assert self.lines[-1] == "data: [DONE]" and not any('"error"' in line for line in self.lines), self.lines[-3:]
        return json.loads(self.lines[-2].removeprefix("data: "))["usage"]["completion_tokens"]


def _while_neighbours_run(server, send) -> list[httpx.Response | list[str]]:
    engine = server.engine_pid()
    neighbours = [Neighbour(server.url) for _ in range(3)]
    for neighbour in neighbours:
        neighbour.start()
    assert all(n.first_chunk.wait(60) for n in neighbours)
    replies = [send(stream) for stream in (False, True, False)]
    for neighbour in neighbours:
        neighbour.join(300)
        assert not neighbour.is_alive(), "a neighbour's stream did not end"
        assert neighbour.completion_tokens() == NEIGHBOUR["max_tokens"]
    assert httpx.get(server.url + "/health").status_code == 200
    assert server.engine_pid() == engine
    after = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=60)
    assert after.status_code == 200, after.text
    return replies


def _send(server, path: str, body: dict, stream: bool) -> httpx.Response | list[str]:
    if not stream:
        return httpx.post(server.url + path, json=body, timeout=60)
    with httpx.stream("POST", server.url + path, json={**body, "stream": True}, timeout=60) as response:
        return [f"{response.status_code}", *(line for line in response.iter_lines() if line)]


def _failed_alone(reply: httpx.Response | list[str]) -> None:
    """The request itself got an error that names no internals, or (for parsers) its text as content."""
    text = reply.text if isinstance(reply, httpx.Response) else "\n".join(reply)
    assert "Traceback" not in text and "faulty_plugin.py" not in text, text[-2000:]
    if isinstance(reply, httpx.Response):
        assert reply.status_code == 200 or "error" in reply.json(), text[-2000:]
    else:
        assert reply[-1] == "data: [DONE]" or '"error"' in text, text[-2000:]


def test_a_raising_tool_parser_fails_only_its_request(server) -> None:
    body = {"messages": [{"role": "user", "content": "call a tool"}], "tools": TOOLS, "max_tokens": 8}
    replies = _while_neighbours_run(server, lambda stream: _send(server, "/v1/chat/completions", body, stream))
    for reply in replies:
        _failed_alone(reply)
        text = reply.text if isinstance(reply, httpx.Response) else "\n".join(reply)
        assert "InjectedFault" in text, text[-2000:]  # it failed of the injected fault, not of something else


def test_a_harmless_constraint_and_tool_work_beside_the_faults(server) -> None:
    # The control: the same plugin serves requests that inject nothing.
    chat = {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS[1:], "max_tokens": 4}
    reply = httpx.post(server.url + "/v1/chat/completions", json=chat, timeout=60)
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]
    choice = {"prompt": "pick", "max_tokens": 4, "structured_outputs": {"choice": ["fine"]}}
    assert httpx.post(server.url + "/v1/completions", json=choice, timeout=60).status_code == 200


def _raising_grammar_fails_only_its_request(server, fault: str) -> None:
    body = {"prompt": "pick one", "max_tokens": 8, "structured_outputs": {"choice": [fault]}}
    replies = _while_neighbours_run(server, lambda stream: _send(server, "/v1/completions", body, stream))
    for reply in replies:
        _failed_alone(reply)
        if isinstance(reply, httpx.Response):
            assert reply.status_code != 200, reply.text  # the engine could not constrain it: an error


def test_a_grammar_that_raises_while_masking_fails_only_its_request(server) -> None:
    _raising_grammar_fails_only_its_request(server, EXPLODE_MASK)


def test_a_grammar_that_raises_while_accepting_fails_only_its_request(server) -> None:
    _raising_grammar_fails_only_its_request(server, EXPLODE_ACCEPT)
