"""The partial JSON reader: every prefix renders to a prefix of the final canonical JSON."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from infercore.parsers import Malformed, parse_partial, render

WORDS = ["", "a", 'quo"te', "back\\slash", "new\nline", "é", "世界", "😀", "\u2028", "tab\t"]


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return rng.choice(WORDS)
    if kind == 1:
        return rng.choice([0, -7, 12345, 3.25, -0.5, 1e-7])
    if kind in (2, 3):
        return rng.choice([True, False, None])
    if kind == 4:
        return rng.choice(WORDS) + rng.choice(WORDS)
    if kind == 5:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(WORDS) + str(i): _value(rng, depth + 1) for i in range(rng.randrange(4))}


@pytest.mark.parametrize("seed", range(40))
def test_prefixes_render_to_prefixes(seed: int) -> None:
    rng = random.Random(seed)
    value = _value(rng)
    python = seed % 4 == 3
    text = repr(value) if python else json.dumps(value, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 2]))
    final, end = parse_partial(text, final=True, python=python)
    assert final is not None and end == len(text)
    canonical = render(final)
    assert json.loads(canonical) == value
    previous = ""
    for cut in range(len(text) + 1):
        node, _ = parse_partial(text[:cut], python=python)
        rendered = render(node) if node is not None else ""
        assert canonical.startswith(rendered) and rendered.startswith(previous), text[:cut]
        previous = rendered


@pytest.mark.parametrize("text", ['{"a" 1}', "[1,]", "{a: 1}", "tru", '{"a": 1', '"\\x"', "01", '{"a": 1,}'])
def test_malformed_json_is_rejected(text: str) -> None:
    with pytest.raises(Malformed):
        parse_partial(text, final=True)
