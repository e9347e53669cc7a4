"""Errors in OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``, bounded and scrubbed.

Messages never carry tracebacks, memory addresses or server paths, and never echo more than a short
prefix of what the client sent.
"""

from __future__ import annotations

import logging
import re
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from infercore.entrypoints.openai.protocol import ErrorInfo, ErrorResponse

logger = logging.getLogger("infercore.server")

MAX_MESSAGE_CHARS = 1000
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
#: A file path of two or more parts; the API's own routes (``/v1/...``), which hints name, are kept.
_PATH = re.compile(r"(?<![\w.])(?!/v1/)(?:/[\w.@+-]+){2,}/?")
_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError", 405: "BadRequestError",
          413: "BadRequestError", 429: "RateLimitError", 500: "InternalServerError", 503: "ServiceUnavailableError"}
#: The error answers a route documents in /openapi.json, each with the body ``ErrorResponse``.
ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 503)}


class APIError(Exception):
    """An error to answer with ``status``; ``message`` is a sentence for the client."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.headers = headers


def scrub(text: str) -> str:
    """Bound ``text`` and remove memory addresses and file paths from it."""
    text = _PATH.sub("<path>", _ADDRESS.sub("<address>", text))
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS] + "… (truncated)"
    return text


def error_body(status: int, message: str, param: str | None = None) -> dict[str, object]:
    info = ErrorInfo(message=scrub(message), type=_TYPES.get(status) or _phrase(status), param=param, code=status)
    return ErrorResponse(error=info).model_dump()


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.replace(" ", "") + "Error"
    except ValueError:
        return "Error"


def error_response(status: int, message: str, param: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param), status_code=status, headers=headers)


def _short(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _texts(value: object) -> str:
    """The characters of a string input, or of the strings in a list input ("" otherwise)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return ""


_TYPE_NAMES = frozenset({"str", "int", "float", "bool", "list", "dict", "tuple", "bytes", "none"})


def _names_a_type(part: object) -> bool:
    """Whether a loc element is a type's name (``constrained-str``, ``list[int]``, ``NamedToolChoice``), which
    no request field or key of ours is."""
    return isinstance(part, str) and bool(part) and (
        part in _TYPE_NAMES or part[0].isupper() or any(c in part for c in "[-'"))


def _union_tags(locs: list[tuple]) -> set[tuple[int, object]]:
    """(position, element) of each loc element that names a union member: pydantic reports a union that nothing
    fits as one error per member, whose locs share a prefix and then differ in a type's name."""
    tags: set[tuple[int, object]] = set()
    for loc in locs:
        for i, part in enumerate(loc):
            if _names_a_type(part) and any(other[:i] == loc[:i] and len(other) > i and _names_a_type(other[i])
                                           and other[i] != part for other in locs):
                tags.add((i, part))
    return tags


def _field(loc: tuple, tags: set[tuple[int, object]]) -> tuple[str, ...]:
    """``loc`` without ``body`` and union member names: the field as the client wrote it."""
    return tuple(str(p) for i, p in enumerate(loc) if p != "body" and (i, p) not in tags)


def _union_prefix(loc: tuple, tags: set[tuple[int, object]]) -> tuple:
    """``loc`` up to its first union member name (all of it when there is none)."""
    cut = next((i for i, p in enumerate(loc) if (i, p) in tags), len(loc))
    return loc[:cut]


def validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    """A sentence naming the first invalid field (and how many more there are), and that field. A union that
    no member fits (``prompt`` is text, texts, token ids or lists of them) is one problem: the sentence gives
    the member error that got furthest into the value, and how many forms the field takes."""
    errors = list(exc.errors())
    if not errors:
        return "the request body is invalid", None
    locs = [tuple(e.get("loc", ())) for e in errors]
    tags = _union_tags(locs)
    first, loc = errors[0], list(_field(locs[0], tags))
    if first.get("type") == "json_invalid":
        return "the request body is not valid JSON; send a JSON object", None
    if not loc and first.get("type") in ("model_attributes_type", "dict_type", "model_type"):
        return "the request body must be a JSON object", None
    surrogate = next((c for e in errors for c in _texts(e.get("input")) if 0xD800 <= ord(c) <= 0xDFFF), None)
    if surrogate is not None and loc:
        return (f"{loc[0]} holds a lone surrogate code point (U+{ord(surrogate):04X}), which is not text that can "
                "be encoded as UTF-8; send valid Unicode text"), loc[0]
    prefixes = [_union_prefix(each, tags) for each in locs]
    # One problem per union that nothing fits (its errors share the prefix before a member name), else per error.
    problem = [prefix if len(prefix) < len(whole) else i for i, (prefix, whole) in enumerate(zip(prefixes, locs))]
    union = prefixes[0]
    members = [i for i, key in enumerate(problem) if key == problem[0]]
    if len(members) > 1:  # the member error deepest into the value, a wrong value before a wrong type
        deepest = max(members, key=lambda i: (len(locs[i]), not str(errors[i].get("type", "")).endswith("_type")))
        first, loc = errors[deepest], list(_field(locs[deepest], tags))
    field = ".".join(loc) or None
    text = f"invalid value for {field or 'the body'}: {first.get('msg', 'invalid')}"
    if "input" in first and first.get("type") != "missing":
        text += f" (got {_short(first['input'])})"
    if len(members) > 1:
        forms = len({locs[i][len(union)] for i in members})
        text += f"; {'.'.join(_field(union, tags))} takes {forms} forms and this fits none"
    problems = len(set(problem))
    if problems > 1:
        text += f"; and {problems - 1} more problem(s)"
    return text, field


def install_error_handlers(app: FastAPI) -> None:
    """Turn validation errors into 400s, HTTP errors and APIError into OpenAI errors, anything else into 500."""

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, field = validation_message(exc)
        return error_response(400, message, field)

    @app.exception_handler(APIError)
    async def _api(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        if exc.status_code == 404:
            message = "no such route; see /openapi.json for the routes this server has"
        return error_response(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error while serving a request")
        return error_response(500, f"internal server error ({type(exc).__name__}); the server log has details")
