"""One template call that does a great deal of work at once (``lipsum(150000)``, ``tojson(indent=999999)``,
a huge ``indent`` or ``expandtabs``) is refused before it runs: in well under the render deadline and
without building its output."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from infercore.tokenizer import ChatTemplateError, apply_chat_template

pytestmark = pytest.mark.serial  # a time bound: runs after the parallel pass, alone

_MESSAGES = [{"role": "user", "content": "hi"}]
#: About 60 lines of JSON, so an indent of a million builds ~120 MB without the bound.
_NESTED = '{% set d = {"a": [[1, 2]] * 20} %}'
BOMBS = {
    "lipsum": "{{ lipsum(150000) }}",
    "lipsum words": "{{ lipsum(n=1, max=1000000) }}",
    "tojson indent": _NESTED + "{{ d|tojson(indent=999999) }}",
    "tojson indent string": _NESTED + '{{ d|tojson(indent="          " * 999) }}',
    "indent filter": '{{ ("x\\n" * 150)|indent(width=999999) }}',
    "expandtabs": '{{ ("\\t" * 150).expandtabs(999999) }}',
}
#: The acceptance bounds for a refused bomb.
MAX_SECONDS = 2.0
MAX_PEAK_BYTES = 20 * 1024 * 1024


@pytest.mark.parametrize("template", BOMBS.values(), ids=BOMBS.keys())
def test_bomb_refused_fast_and_small(template: str) -> None:
    tracemalloc.start()
    start = time.monotonic()
    try:
        with pytest.raises(ChatTemplateError, match="limit"):
            apply_chat_template(None, _MESSAGES, chat_template=template, timeout_s=30)
        elapsed = time.monotonic() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < MAX_SECONDS, f"the render ran {elapsed:.1f} s before it was refused"
    assert peak < MAX_PEAK_BYTES, f"the render allocated {peak / 2**20:.0f} MB before it was refused"


def test_ordinary_uses_still_render() -> None:
    template = ('{{ {"k": [1]}|tojson(indent=2) }}|{{ "a\\nb"|indent(2, first=true) }}|{{ "a\\tb".expandtabs(4) }}|'
                "{{ lipsum(1, false, 5, 6)|wordcount }}")
    text = apply_chat_template(None, _MESSAGES, chat_template=template)
    assert text == '{\n  "k": [\n    1\n  ]\n}|  a\n  b|a   b|5'
