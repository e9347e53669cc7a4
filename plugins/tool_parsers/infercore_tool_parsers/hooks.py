"""Hook implementations of this plugin: every tool-call and reasoning format it ships."""

from __future__ import annotations

from infercore.plugin_api import RegisterFn, hookimpl

INFERCORE_PLUGIN_API = (1, 6)  # parsers and grammar backends joined the plugin API in 1.6

_TOOL = "infercore_tool_parsers.tool"
_REASONING = "infercore_tool_parsers.reasoning"

TOOL_PARSERS = {
    "hermes": f"{_TOOL}.hermes:HermesToolParser",
    "llama3_json": f"{_TOOL}.llama3_json:Llama3JsonToolParser",
    "pythonic": f"{_TOOL}.pythonic:PythonicToolParser",
    "llama4_pythonic": f"{_TOOL}.llama4_pythonic:Llama4PythonicToolParser",
    "mistral": f"{_TOOL}.mistral:MistralToolParser",
    "qwen3_coder": f"{_TOOL}.qwen3_coder:Qwen3CoderToolParser",
    "deepseek_v3": f"{_TOOL}.deepseek_v3:DeepSeekV3ToolParser",
    "deepseek_v31": f"{_TOOL}.deepseek_v31:DeepSeekV31ToolParser",
    "kimi_k2": f"{_TOOL}.kimi_k2:KimiK2ToolParser",
    "glm45": f"{_TOOL}.glm45:Glm45ToolParser",
    "granite": f"{_TOOL}.granite:GraniteToolParser",
    "internlm": f"{_TOOL}.internlm:InternLMToolParser",
    "jamba": f"{_TOOL}.jamba:JambaToolParser",
    "xlam": f"{_TOOL}.xlam:XLamToolParser",
    "phi4_mini_json": f"{_TOOL}.phi4_mini_json:Phi4MiniJsonToolParser",
}

REASONING_PARSERS = {
    "deepseek_r1": f"{_REASONING}.think:DeepSeekR1ReasoningParser",
    "qwen3": f"{_REASONING}.think:Qwen3ReasoningParser",
    "glm45": f"{_REASONING}.think:Glm45ReasoningParser",
    "granite": f"{_REASONING}.granite:GraniteReasoningParser",
}


@hookimpl
def register_tool_parsers(register: RegisterFn) -> None:
    for name, target in TOOL_PARSERS.items():
        register(name, target)


@hookimpl
def register_reasoning_parsers(register: RegisterFn) -> None:
    for name, target in REASONING_PARSERS.items():
        register(name, target)
