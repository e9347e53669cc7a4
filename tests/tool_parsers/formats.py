"""How each shipped format writes a list of calls, and what malformed output of it looks like."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Call = tuple[str, dict[str, Any]]

DS_CALLS_BEGIN, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL_BEGIN, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def objects(calls: list[Call], key: str = "arguments") -> list[dict[str, Any]]:
    return [{"name": name, key: arguments} for name, arguments in calls]


def raw(value: Any) -> str:
    return value if isinstance(value, str) else dumps(value)


def pythonic(calls: list[Call]) -> str:
    return "[" + ", ".join(f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})" for n, a in calls) + "]"


def qwen3_coder(calls: list[Call]) -> str:
    def one(name: str, arguments: dict[str, Any]) -> str:
        params = "".join(f"<parameter={k}>\n{raw(v)}\n</parameter>\n" for k, v in arguments.items())
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    return "\n".join(one(n, a) for n, a in calls)


def glm45(calls: list[Call]) -> str:
    def one(name: str, arguments: dict[str, Any]) -> str:
        pairs = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{raw(v)}</arg_value>\n" for k, v in arguments.items())
        return f"<tool_call>{name}\n{pairs}</tool_call>"
    return "\n".join(one(n, a) for n, a in calls)


@dataclass
class Format:
    """One way a parser's format is written; ``anchored`` formats only call at the output's start."""

    parser: str
    variant: str
    write: Callable[[list[Call]], str]
    anchored: bool = False
    malformed: list[str] = field(default_factory=list)


FORMATS = [
    Format("hermes", "tags", lambda c: "\n".join(f"<tool_call>\n{dumps(o)}\n</tool_call>" for o in objects(c)),
           malformed=["<tool_call>not json</tool_call>", '<tool_call>{"arguments": {"a": 1}}</tool_call>',
                      '<tool_call>{"name": "f", "arguments": [1]}</tool_call>']),
    Format("llama3_json", "bare", lambda c: "; ".join(dumps(o) for o in objects(c, "parameters")), anchored=True,
           malformed=['{"foo": 1}', '{"name": "f", "parameters": "x"}', "{not json"]),
    Format("llama3_json", "python_tag", lambda c: "<|python_tag|>" + "; ".join(dumps(o) for o in objects(c)),
           anchored=True, malformed=["<|python_tag|>print(1)"]),
    Format("pythonic", "list", pythonic, anchored=True, malformed=["[1, 2, 3]", "[Note] see below."]),
    Format("llama4_pythonic", "tags", lambda c: f"<|python_start|>{pythonic(c)}<|python_end|>", anchored=True,
           malformed=["<|python_start|>print(1)<|python_end|>"]),
    Format("llama4_pythonic", "list", pythonic, anchored=True, malformed=["[1, 2]"]),
    Format("mistral", "pre_v11", lambda c: "[TOOL_CALLS] " + dumps(objects(c)),
           malformed=["[TOOL_CALLS] not json", '[TOOL_CALLS] [{"arguments": {}}]']),
    Format("mistral", "v11", lambda c: "".join(f"[TOOL_CALLS]{n}{dumps(a)}" for n, a in c),
           malformed=["[TOOL_CALLS]f[1, 2]", "[TOOL_CALLS]!bad"]),
    Format("mistral", "v13", lambda c: "".join(f"[TOOL_CALLS]{n}[CALL_ID]abc{i}[ARGS]{dumps(a)}"
                                               for i, (n, a) in enumerate(c))),
    Format("qwen3_coder", "xml", qwen3_coder,
           malformed=["<tool_call>\n<func=f>\n</tool_call>", "<tool_call>garbage</tool_call>"]),
    Format("deepseek_v3", "fenced", lambda c: DS_CALLS_BEGIN + "".join(
        f"{DS_CALL_BEGIN}function{DS_SEP}{n}\n```json\n{dumps(a)}\n```{DS_CALL_END}" for n, a in c) + DS_CALLS_END,
        malformed=[f"{DS_CALLS_BEGIN}garbage{DS_CALLS_END}",
                   f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}f\nnot json{DS_CALL_END}{DS_CALLS_END}"]),
    Format("deepseek_v31", "plain", lambda c: DS_CALLS_BEGIN + "".join(
        f"{DS_CALL_BEGIN}{n}{DS_SEP}{dumps(a)}{DS_CALL_END}" for n, a in c) + DS_CALLS_END,
        malformed=[f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}f{DS_SEP}not json{DS_CALL_END}{DS_CALLS_END}"]),
    Format("kimi_k2", "section", lambda c: "<|tool_calls_section_begin|>" + "".join(
        f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{dumps(a)}<|tool_call_end|>"
        for i, (n, a) in enumerate(c)) + "<|tool_calls_section_end|>",
        malformed=["<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>"
                   "oops<|tool_call_end|><|tool_calls_section_end|>"]),
    Format("glm45", "xml", glm45, malformed=['<tool_call>{"name": "f"}</tool_call>', "<tool_call>\n</tool_call>"]),
    Format("granite", "3.0", lambda c: "<|tool_call|>" + dumps(objects(c)),
           malformed=['<|tool_call|>{"name": "f"}', "<|tool_call|>[oops]"]),
    Format("granite", "3.1", lambda c: "<tool_call>" + dumps(objects(c))),
    Format("internlm", "action", lambda c: "\n".join(
        f"<|action_start|><|plugin|>\n{dumps(o)}<|action_end|>" for o in objects(c, "parameters")),
        malformed=["<|action_start|><|plugin|>\nnot json<|action_end|>",
                   "<|action_start|><|interpreter|>print(1)<|action_end|>"]),
    Format("jamba", "tags", lambda c: "<tool_calls>" + dumps(objects(c)) + "</tool_calls>",
           malformed=["<tool_calls>not json</tool_calls>", '<tool_calls>[{"arguments": {}}]</tool_calls>']),
    Format("xlam", "bare", lambda c: dumps(objects(c)), anchored=True, malformed=["[1, 2]"]),
    Format("xlam", "fenced", lambda c: "```json\n" + dumps(objects(c)) + "\n```", anchored=True,
           malformed=['```json\n{"a": 1}\n```', "```python\nprint(1)\n```"]),
    Format("phi4_mini_json", "functools", lambda c: "functools" + dumps(objects(c)),
           malformed=["functools[oops]", 'functools[{"arguments": {}}]']),
]
