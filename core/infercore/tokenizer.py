"""Sandboxed chat-template rendering (tokenizer loading lives in :mod:`infercore.tokenizer_loading`).

Chat templates and ``chat_template_kwargs`` may come from requests, so they are untrusted: they run in
Jinja's immutable sandbox, and every way a template can burn time or memory (loops over ``range``,
``*``/``**``/``+`` on big values, ``~`` concatenation, filters with width arguments, function calls,
output) is checked against a size limit and a deadline. Whatever turns a value into text (output,
``~``, ``%``, text-building filters, calls) is checked *before* it runs against the size the value
would take written out, so a list holding one string a million times is refused while it is still
small in memory.
"""

from __future__ import annotations

import builtins
import functools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jinja2 import TemplateError, filters, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from jinja2.utils import generate_lorem_ipsum

from infercore.tokenizer_loading import get_tokenizer  # noqa: F401 - where callers have always found it

if TYPE_CHECKING:  # transformers (and torch under it) load only when a tokenizer does
    from transformers import PreTrainedTokenizerBase

#: Largest rendered prompt, and largest string or list a template may build, in characters / items.
MAX_TEMPLATE_OUTPUT = 1_000_000
#: Seconds a template may take to render.
TEMPLATE_TIMEOUT_S = 5.0
#: Longest chat template source accepted, in characters.
MAX_TEMPLATE_SOURCE = 256_000
#: Most items one ``range()`` in a template may yield.
MAX_TEMPLATE_RANGE = 100_000
#: Widest indent a template may ask of ``indent`` or ``tojson`` (spaces, or characters of an indent string).
MAX_TEMPLATE_INDENT = 64
#: Characters ``lipsum`` may write per word, at most (for its size bound before it runs).
_LIPSUM_WORD_CHARS = 16
_RANGE_CHECK_EVERY = 1024
_MAX_INT_BITS = 4096
_TEMPLATE_CACHE_SIZE = 64
#: A number of seven or more digits in a format string: a field width that would build a huge string.
_LONG_NUMBER = re.compile(r"\d{7,}")
#: Filters that pick from or reshape their input without writing its contents out as text.
_STRUCTURAL_FILTERS = frozenset({
    "abs", "attr", "batch", "count", "d", "default", "dictsort", "first", "float", "groupby", "int", "items",
    "last", "length", "list", "map", "max", "min", "random", "reject", "rejectattr", "reverse", "round", "select",
    "selectattr", "slice", "sort", "unique"})


@dataclass(frozen=True)
class TokenizerInfo:
    """Facts about a tokenizer that the engine reads often, computed once."""

    eos_token_id: int | None
    bos_token_id: int | None
    all_special_ids: frozenset[int]
    vocab_size: int

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase) -> TokenizerInfo:
        return cls(eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                   all_special_ids=frozenset(tokenizer.all_special_ids), vocab_size=len(tokenizer))


class ChatTemplateError(ValueError):
    """A chat template could not be rendered; the message says why and what to change."""


class _Deadline:
    """Raises once the render has run past its time budget."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.seconds = seconds

    def check(self) -> None:
        if time.monotonic() > self.end:
            raise ChatTemplateError(
                f"the chat template took longer than {self.seconds:g} s to render; simplify the template")


def _check_size(value: Any, limit: int) -> Any:
    if isinstance(value, (str, list, tuple, bytes)) and len(value) > limit:
        raise ChatTemplateError(
            f"the chat template built a value of {len(value)} items, over the limit of {limit}; "
            "simplify the template")
    return value


def _written_size(value: Any, limit: int) -> int:
    """About how many characters ``value`` takes written out (as text or JSON), counted until past ``limit``.

    Nested lists, tuples and dicts count every element each time it appears, as writing them out does;
    the walk stops as soon as the count passes ``limit``, so it costs at most ``limit`` steps.
    """
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, (list, tuple, Mapping)):
            total += len(item) + 1
            if total <= limit:
                stack.extend(item.items() if isinstance(item, Mapping) else item)
        else:
            total += 1
        if total > limit:
            break
    return total


def _check_written_size(value: Any, limit: int) -> Any:
    if isinstance(value, (list, tuple, Mapping)) and _written_size(value, limit) > limit:
        raise ChatTemplateError(
            f"the chat template would write out a value of more than the limit of {limit} characters; "
            "simplify the template")
    return value


class _GenerationExtension(Extension):
    """Accepts ``{% generation %}...{% endgeneration %}`` (used by training templates) and renders its body."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _BoundedCodeGenerator(CodeGenerator):
    """Routes ``~`` concatenation through the environment so its operands and result sizes are checked."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        # Jinja's own visit_Concat, with each operand checked before it is turned into text.
        join = "markup_join" if frame.eval_ctx.autoescape or frame.eval_ctx.volatile else "str_join"
        self.write(f"environment.checked_value({join}((")
        for arg in node.nodes:
            self.write("environment.written_value(")
            self.visit(arg, frame)
            self.write("), ")
        self.write(")))")


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    """Immutable sandbox whose renders are limited in time and in the size of what they build."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, finalize=self.written_value,
                         extensions=[loopcontrols, _GenerationExtension])
        self._render_state = threading.local()
        filters = {**self.filters, "tojson": _tojson, "replace": self._replace, "format": self._format,
                   "indent": self._indent}
        self.filters = {name: self._bounded(fn, written=name not in _STRUCTURAL_FILTERS)
                        for name, fn in filters.items()}
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = _strftime_now
        self.globals["range"] = self._range
        self.globals["lipsum"] = self._lipsum

    @property
    def limit(self) -> int:
        return getattr(self._render_state, "limit", MAX_TEMPLATE_OUTPUT)

    @property
    def deadline(self) -> _Deadline:
        return self._render_state.deadline

    def start_render(self, limit: int, timeout_s: float) -> None:
        """Set this thread's limits for the render that follows."""
        self._render_state.limit = limit
        self._render_state.deadline = _Deadline(timeout_s)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__} is not allowed")

    def _check_args(self, args: tuple[Any, ...], written: bool) -> None:
        """Check a call's arguments; ``written`` when the call may write their contents out as text."""
        self.deadline.check()
        for arg in args:
            if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > self.limit:
                raise ChatTemplateError(f"the chat template passed the number {arg}, over the limit of {self.limit}")
            _check_size(arg, self.limit)
            if written:
                _check_written_size(arg, self.limit)

    def _bounded(self, fn: Callable[..., Any], written: bool) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self._check_args((*args, *kwargs.values()), written)
            return _check_size(fn(*args, **kwargs), self.limit)

        return wrapper

    def _replace(self, text: Any, old: str, new: str, count: int | None = None) -> str:
        text = str(text)
        self._check_replace(text, old, new)
        return text.replace(old, new, -1 if count is None else count)

    def _format(self, template: Any, *args: Any, **kwargs: Any) -> str:
        template = str(template)
        self._check_format(template)
        return template % (kwargs or args)

    def _indent(self, text: Any, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
        text = str(text)
        _check_indent(width)
        lines = text.count("\n") + 1
        if len(text) + lines * (len(width) if isinstance(width, str) else width) > self.limit:
            raise ChatTemplateError(f"the chat template's indent() would build more than the limit of {self.limit} "
                                    "characters; simplify the template")
        return filters.do_indent(text, width, first, blank)

    def _lipsum(self, n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
        """Jinja's ``lipsum``, refused before it runs when it could write more than the limit."""
        words = builtins.max(n, 0) * builtins.max(min, max, 0)
        if words * _LIPSUM_WORD_CHARS > self.limit:
            raise ChatTemplateError(f"the chat template asked lipsum() for up to {words} words, over the limit of "
                                    f"{self.limit} characters; simplify the template")
        return generate_lorem_ipsum(n=n, html=html, min=min, max=max)

    def _check_replace(self, text: str, old: str, new: str) -> None:
        if len(new) > len(old) and len(text) + text.count(old) * (len(new) - len(old)) > self.limit:
            raise ChatTemplateError(f"the chat template's replace() would build more than the limit of "
                                    f"{self.limit} characters; simplify the template")

    def _check_format(self, template: str) -> None:
        if _LONG_NUMBER.search(template):
            raise ChatTemplateError("the chat template formats with a width over the limit; simplify the template")

    def _range(self, *args: int) -> Iterator[int]:
        values = range(*args)
        if len(values) > MAX_TEMPLATE_RANGE:
            raise ChatTemplateError(
                f"the chat template asked for a range of {len(values)} numbers; the limit is {MAX_TEMPLATE_RANGE}")
        return self._timed(values)

    def _timed(self, values: range) -> Iterator[int]:
        for i, value in enumerate(values):
            if i % _RANGE_CHECK_EVERY == 0:
                self.deadline.check()
            yield value

    def checked_value(self, value: Any) -> Any:
        self.deadline.check()
        return _check_size(value, self.limit)

    def written_value(self, value: Any) -> Any:
        """``value``, once it is known to be small enough to write out as text."""
        self.deadline.check()
        return _check_written_size(value, self.limit)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        self.deadline.check()
        if isinstance(left, int) and isinstance(right, int) and operator in ("*", "**"):
            bits = left.bit_length() * abs(right) if operator == "**" else left.bit_length() + right.bit_length()
            if bits > _MAX_INT_BITS:
                raise ChatTemplateError("the chat template computed a number too large to handle; simplify the template")
        if operator == "%" and isinstance(left, str):
            self._check_format(left)
            self.written_value(right)
        if operator == "*":
            for seq, count in ((left, right), (right, left)):
                if hasattr(seq, "__len__") and isinstance(count, int) and len(seq) * count > self.limit:
                    raise ChatTemplateError(
                        f"the chat template repeated a value {count} times, over the limit of {self.limit} items")
        return self.checked_value(super().call_binop(context, operator, left, right))

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        self._check_args((*args, *kwargs.values()), written=True)
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str) and getattr(__obj, "__name__", "") == "replace" and len(args) >= 2:
            self._check_replace(owner, str(args[0]), str(args[1]))
        if isinstance(owner, str) and getattr(__obj, "__name__", "") == "expandtabs":
            tab = (*args, *kwargs.values(), 8)[0]
            if isinstance(tab, int) and len(owner) + owner.count("\t") * tab > self.limit:
                raise ChatTemplateError(f"the chat template's expandtabs() would build more than the limit of "
                                        f"{self.limit} characters; simplify the template")
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is not None:
            self._check_format(value.__self__)
        return wrapped

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.deadline.check()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.deadline.check()
        return super().getitem(obj, argument)


def _check_indent(indent: Any) -> None:
    """Refuse an indent wider than MAX_TEMPLATE_INDENT: it is written once per line of the output."""
    width = len(indent) if isinstance(indent, str) else indent
    if isinstance(width, int) and width > MAX_TEMPLATE_INDENT:
        raise ChatTemplateError(f"the chat template asked for an indent of {width}; the limit is {MAX_TEMPLATE_INDENT}")


def _tojson(value: Any, indent: int | str | None = None, separators: tuple[str, str] | None = None,
            sort_keys: bool = False, ensure_ascii: bool = False) -> str:
    _check_indent(indent)
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


_ENV = _BoundedEnvironment()


@functools.lru_cache(maxsize=_TEMPLATE_CACHE_SIZE)
def _compile(source: str) -> Any:
    return _ENV.from_string(source)


def _pick_template(tokenizer: PreTrainedTokenizerBase | None, chat_template: str | None, tools: Any) -> str:
    template = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
    if isinstance(template, Mapping):
        key = "tool_use" if tools and "tool_use" in template else "default"
        template = template.get(key)
    if isinstance(template, str) and len(template) > MAX_TEMPLATE_SOURCE:
        raise ChatTemplateError(
            f"the chat template has {len(template)} characters, over the limit of {MAX_TEMPLATE_SOURCE}; "
            "use a shorter template")
    if not template:
        raise ChatTemplateError(
            "the tokenizer has no chat template; pass --chat-template (a file or a template string), "
            "or send a plain completion request")
    return template


def _special_tokens(tokenizer: PreTrainedTokenizerBase | None) -> dict[str, str]:
    names = ("bos_token", "eos_token", "pad_token", "unk_token")
    return {n: str(getattr(tokenizer, n, None) or "") for n in names}


def _render(template: Any, variables: dict[str, Any], limit: int) -> str:
    parts: list[str] = []
    size = 0
    for piece in template.generate(**variables):
        size += len(piece)
        if size > limit:
            raise ChatTemplateError(
                f"the chat template rendered more than the limit of {limit} characters; shorten the messages "
                "or fix the template")
        _ENV.deadline.check()
        parts.append(piece)
    return "".join(parts)


def _cut_after_final_message(text: str, messages: list[Any]) -> str:
    content = messages[-1].get("content") if isinstance(messages[-1], Mapping) else None
    if not isinstance(content, str) or not content.strip():
        raise ChatTemplateError("continue_final_message needs a final message with text content")
    at = text.rfind(content.strip())
    if at < 0:
        raise ChatTemplateError("continue_final_message: the template did not render the final message's text")
    return text[: at + len(content.strip())]


def apply_chat_template(tokenizer: PreTrainedTokenizerBase | None, messages: list[Any], *,
                        chat_template: str | None = None, add_generation_prompt: bool = True,
                        tools: list[Any] | None = None, chat_template_kwargs: dict[str, Any] | None = None,
                        continue_final_message: bool = False, max_output_chars: int = MAX_TEMPLATE_OUTPUT,
                        timeout_s: float = TEMPLATE_TIMEOUT_S) -> str:
    """Render ``messages`` to a prompt string with the tokenizer's (or the given) chat template.

    The render is sandboxed and bounded: past ``max_output_chars`` characters or ``timeout_s`` seconds it
    fails with :class:`ChatTemplateError`, as it does for any template error or sandbox violation.
    """
    if not messages:
        raise ChatTemplateError("messages is empty; send at least one message")
    if continue_final_message and add_generation_prompt:
        raise ChatTemplateError(
            "continue_final_message and add_generation_prompt cannot both be true; set one of them to false")
    source = _pick_template(tokenizer, chat_template, tools)
    variables: dict[str, Any] = dict(chat_template_kwargs or {})
    variables.update(_special_tokens(tokenizer))
    variables.update(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt)
    _ENV.start_render(max_output_chars, timeout_s)
    try:
        text = _render(_compile(source), variables, max_output_chars)
    except ChatTemplateError:
        raise
    except SecurityError as exc:
        raise ChatTemplateError(f"the chat template tried an unsafe operation ({exc}); fix the template") from None
    except (TemplateError, ArithmeticError, TypeError, ValueError, RecursionError, MemoryError) as exc:
        raise ChatTemplateError(f"the chat template failed to render: {exc}") from None
    return _cut_after_final_message(text, messages) if continue_final_message else text
