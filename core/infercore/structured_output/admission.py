"""Bounds a constraint must keep before any grammar work: size, nesting depth, parseable JSON, local ``$ref``s.

The server checks these in the API process, so a constraint that could exhaust the engine's stack,
memory or compile threads is a 400 there and never reaches the engine. Backend-specific checks (is the
regex valid, does the backend support the keyword) stay with the backend's ``validate``.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from infercore.regex_safety import MAX_REGEX_CHARS
from infercore.sampling_params import SamplingParamsError, StructuredOutputsParams

#: Characters of one constraint: a schema's JSON text, a grammar, or all choices together (a regex has
#: its own, smaller bound, ``MAX_REGEX_CHARS``).
MAX_CONSTRAINT_CHARS = 256 * 1024
#: Nesting of JSON arrays and objects in a schema (a property's schema is two levels below its object).
MAX_SCHEMA_DEPTH = 64
#: Alternatives of a ``choice`` constraint.
MAX_CHOICES = 1024
#: JSON-schema keywords whose values are data, never schemas: a ``$ref`` inside them is not a reference.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})

_PARAM = "structured_outputs"


def _fail(message: str) -> NoReturn:
    raise SamplingParamsError(message, _PARAM)


def check_constraint(params: StructuredOutputsParams) -> None:
    """Raise :class:`SamplingParamsError` (param ``structured_outputs``) with a sentence saying what to
    change when ``params`` is over a bound, not parseable, or refers to a schema outside itself."""
    kind = params.kind
    if kind == "json":
        check_schema(params.json)
    elif kind == "choice":
        choices = params.choice or []
        if len(choices) > MAX_CHOICES:
            _fail(f"structured_outputs.choice lists {len(choices)} alternatives; at most {MAX_CHOICES} are allowed")
        _check_length("choice", sum(len(c) for c in choices))
    elif kind == "regex":
        _check_length(kind, len(params.regex or ""), MAX_REGEX_CHARS)
    elif kind == "grammar":
        _check_length(kind, len(params.grammar or ""))


def _check_length(field: str, chars: int, limit: int = MAX_CONSTRAINT_CHARS) -> None:
    if chars > limit:
        _fail(f"the {field} constraint has {chars} characters; at most {limit} are allowed, so send a shorter one")


def check_schema(schema: str | dict[str, Any] | None) -> None:
    """Bounds of a JSON schema given as text or as a parsed object (see :func:`check_constraint`)."""
    if isinstance(schema, str):
        _check_length("json", len(schema))
        try:
            schema = json.loads(schema)
        except RecursionError:
            _fail(f"the JSON schema nests arrays or objects deeper than {MAX_SCHEMA_DEPTH} levels; flatten it")
        except ValueError as exc:
            _fail(f"the JSON schema is not valid JSON ({exc}); send a JSON object")
    refs = _walk(schema)
    try:
        text = json.dumps(schema)
    except (TypeError, ValueError):
        _fail("the JSON schema holds values that are not JSON; send plain JSON")
    _check_length("json", len(text))
    for ref in refs:
        if not ref.startswith("#"):
            _fail(f"the JSON schema refers to {ref[:200]!r} outside itself; external $ref documents are not "
                  "fetched, so put the referenced schema under $defs and refer to it as #/$defs/NAME")


def _walk(schema: Any) -> list[str]:
    """Every ``$ref`` string of ``schema``; raises when it nests deeper than :data:`MAX_SCHEMA_DEPTH`.
    Iterative, so a hostile depth cannot exhaust the stack."""
    refs: list[str] = []
    stack: list[tuple[Any, int, bool]] = [(schema, 1, True)]
    while stack:
        value, depth, is_schema = stack.pop()
        if not isinstance(value, (dict, list)):
            continue
        if depth > MAX_SCHEMA_DEPTH:
            _fail(f"the JSON schema nests arrays or objects deeper than {MAX_SCHEMA_DEPTH} levels; flatten it")
        if isinstance(value, list):
            stack.extend((item, depth + 1, is_schema) for item in value)
            continue
        for key, item in value.items():
            if is_schema and key == "$ref" and isinstance(item, str):
                refs.append(item)
            stack.append((item, depth + 1, is_schema and key not in _DATA_KEYWORDS))
    return refs
