"""Chat templates that build a value small in memory but huge once written out (one string repeated a
hundred thousand times) are refused before it is written, not after 150 MB were spent on it."""

from __future__ import annotations

import tracemalloc

import pytest

from infercore.tokenizer import MAX_TEMPLATE_OUTPUT, ChatTemplateError, apply_chat_template

#: A list of 150,000 references to one 999-character string: ~1 MB in memory, 150 MB as text.
_BIG = '{% set a = ["x" * 999] * 150000 %}'
WRITERS = {
    "output": _BIG + "{{ a }}",
    "join filter": _BIG + "{{ a|join }}",
    "tojson filter": _BIG + "{{ a|tojson }}",
    "string filter": _BIG + "{{ a|string|length }}",
    "concat": _BIG + '{{ "" ~ a }}',
    "percent format": _BIG + '{{ "%s" % a }}',
    "method call": _BIG + '{{ "".join(a) }}',
    "nested": '{% set b = [["x" * 999] * 1000] * 1000 %}{{ b|tojson }}',
    "dict values": '{% set d = {"k": ["x" * 999] * 150000} %}{{ d }}',
}
#: Peak of new Python allocations a refused render may make (the value itself is ~1.2 MB).
PEAK_BYTES = 16 * 1024 * 1024


@pytest.mark.parametrize("template", WRITERS.values(), ids=WRITERS.keys())
def test_huge_written_value_refused_before_it_is_built(template: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ChatTemplateError, match=f"limit of {MAX_TEMPLATE_OUTPUT} characters"):
            apply_chat_template(None, [{"role": "user", "content": "hi"}], chat_template=template)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"the render allocated {peak / 2**20:.0f} MB before it was refused"


def test_values_under_the_limit_still_render() -> None:
    template = ('{% set a = ["ab"] * 1000 %}{{ a|join }}|{{ a|length }}|{{ {"k": a[:2]}|tojson }}|{{ "" ~ a[:2] }}|'
                '{% for m in messages %}{{ m.role ~ ":" ~ m.content }}{% endfor %}')
    text = apply_chat_template(None, [{"role": "user", "content": "hi"}], chat_template=template)
    assert text == "ab" * 1000 + '|1000|{"k": ["ab", "ab"]}|[\'ab\', \'ab\']|user:hi'
