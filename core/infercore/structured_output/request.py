"""Turning the request surface (OpenAI ``response_format``, ``tool_choice``, vLLM's ``guided_*``
fields) into one :class:`StructuredOutputsParams` for the server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from infercore.sampling_params import StructuredOutputsParams
from infercore.structured_output.cache import grammar_key

#: vLLM's legacy request fields and the constraint each sets.
_GUIDED_FIELDS = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice",
                  "guided_grammar": "grammar"}


def _as_dict(value: Any) -> Any:
    """Request bodies arrive as dicts or as pydantic models; treat both alike."""
    dump = getattr(value, "model_dump", None)
    return dump(exclude_none=True) if callable(dump) else value


def response_format_params(response_format: Any) -> StructuredOutputsParams | None:
    """The constraint of an OpenAI ``response_format`` (``text``, ``json_object``, ``json_schema``)."""
    response_format = _as_dict(response_format)
    if response_format is None:
        return None
    if not isinstance(response_format, Mapping):
        raise ValueError("response_format must be an object such as {\"type\": \"json_object\"}")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    if kind == "json_schema":
        spec = _as_dict(response_format.get("json_schema"))
        if not isinstance(spec, Mapping) or spec.get("schema") is None:
            raise ValueError("response_format of type json_schema needs json_schema.schema, the JSON schema "
                             "the reply must follow")
        schema = spec["schema"]
        if not isinstance(schema, (dict, str)):
            raise ValueError("response_format.json_schema.schema must be a JSON object")
        return StructuredOutputsParams(json=schema)
    raise ValueError(f"response_format type {kind!r} is not supported; use text, json_object or json_schema")


def structured_outputs_from_request(*, response_format: Any = None, structured_outputs: Any = None,
                                    guided_json: str | dict[str, Any] | None = None,
                                    guided_regex: str | None = None, guided_choice: list[str] | None = None,
                                    guided_grammar: str | None = None) -> StructuredOutputsParams | None:
    """Merge every way a request can ask for a constraint into one; None when it asks for none.

    Raises ``ValueError`` naming the fields when more than one asks for a different constraint.
    """
    found: dict[str, StructuredOutputsParams] = {}
    from_format = response_format_params(response_format)
    if from_format is not None:
        found["response_format"] = from_format
    structured_outputs = _as_dict(structured_outputs)
    if isinstance(structured_outputs, Mapping):
        structured_outputs = StructuredOutputsParams(**structured_outputs)
    if structured_outputs is not None:
        found["structured_outputs"] = structured_outputs
    legacy = {"guided_json": guided_json, "guided_regex": guided_regex, "guided_choice": guided_choice,
              "guided_grammar": guided_grammar}
    for name, value in legacy.items():
        if value is not None:
            found[name] = StructuredOutputsParams(**{_GUIDED_FIELDS[name]: value})
    distinct = {grammar_key(p) for p in found.values()}
    if len(distinct) > 1:
        raise ValueError(f"the request asks for several different output constraints ({', '.join(found)}); "
                         "send only one of them")
    return next(iter(found.values()), None)


def tool_choice_params(tool_choice: Any, tools: Sequence[Any] | None) -> StructuredOutputsParams | None:
    """The JSON-schema constraint a ``tool_choice`` implies, or None (``auto``, ``none``, absent).

    ``required``: a JSON array of at least one ``{"name", "arguments"}`` object, each naming one of
    ``tools`` with arguments matching that tool's parameters. A named function: the arguments
    object of that function alone.
    """
    tool_choice = _as_dict(tool_choice)
    if tool_choice is None or tool_choice in ("auto", "none"):
        return None
    functions = _functions(tools)
    if tool_choice == "required":
        if not functions:
            raise ValueError("tool_choice is 'required' but the request lists no tools; add tools or "
                             "use tool_choice 'auto'")
        calls = [{"type": "object",
                  "properties": {"name": {"const": name}, "arguments": params},
                  "required": ["name", "arguments"], "additionalProperties": False}
                 for name, params in functions.items()]
        schema = {"type": "array", "minItems": 1, "items": calls[0] if len(calls) == 1 else {"anyOf": calls}}
        return StructuredOutputsParams(json=schema)
    if isinstance(tool_choice, Mapping) and isinstance(_as_dict(tool_choice.get("function")), Mapping):
        name = _as_dict(tool_choice["function"]).get("name")
        if name not in functions:
            known = ", ".join(functions) or "none"
            raise ValueError(f"tool_choice names function {name!r}, which is not among the request's tools "
                             f"({known}); name one of them")
        return StructuredOutputsParams(json=functions[name])
    raise ValueError("tool_choice must be 'auto', 'none', 'required' or "
                     "{\"type\": \"function\", \"function\": {\"name\": ...}}")


def _functions(tools: Sequence[Any] | None) -> dict[str, dict[str, Any]]:
    """Function name → parameters schema (an empty object when the tool declares none)."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        tool = _as_dict(tool)
        function = _as_dict(tool.get("function")) if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise ValueError("each tool must be {\"type\": \"function\", \"function\": {\"name\": ..., "
                             "\"parameters\": {...}}}")
        out[function["name"]] = function.get("parameters") or {"type": "object", "properties": {}}
    return out
