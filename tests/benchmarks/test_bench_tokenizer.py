"""scripts/make_bench_tokenizer.py writes a tokenizer with exactly the model's vocab size, every id a token."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_bench_tokenizer.py"
VOCAB_SIZE = 3000


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bench-tokenizer") / "tok"
    result = subprocess.run([sys.executable, str(SCRIPT), str(path), "--vocab-size", str(VOCAB_SIZE)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == {"tokenizer": str(path), "vocab_size": VOCAB_SIZE}
    return path


def test_every_id_below_the_vocab_size_is_one_token(folder: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    assert len(tokenizer) == VOCAB_SIZE
    tokens = tokenizer.convert_ids_to_tokens(list(range(VOCAB_SIZE)))
    assert all(tokens) and len(set(tokens)) == VOCAB_SIZE
    assert all(tokenizer.decode([i]) for i in range(0, VOCAB_SIZE, 7))


def test_text_round_trips_and_uses_the_added_merges(folder: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    text = "The engine schedules a batch of requests; the cache holds their blocks. " * 3
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert len(ids) < len(text) / 2


def test_a_vocab_smaller_than_the_trained_one_is_refused() -> None:
    with pytest.raises(ValueError, match="already has"):
        _fill({"model": {"vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "added_tokens": []}, 2)


def _fill(document: dict, size: int) -> dict:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_bench_tokenizer", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fill_vocab(document, size)


def test_filled_merges_follow_the_document_format() -> None:
    as_strings = _fill({"model": {"vocab": {"a": 0, "b": 1}, "merges": []}, "added_tokens": []}, 4)
    assert as_strings["model"]["vocab"] == {"a": 0, "b": 1, "aa": 2, "ab": 3}
    assert as_strings["model"]["merges"] == ["a a", "a b"]
    as_lists = _fill({"model": {"vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]},
                      "added_tokens": [{"id": 3, "content": "<s>"}]}, 6)
    assert as_lists["model"]["vocab"] == {"a": 0, "b": 1, "ab": 2, "aa": 4, "aab": 5}
    assert as_lists["model"]["merges"] == [["a", "b"], ["a", "a"], ["a", "ab"]]


def test_bench_serve_text_prompts_are_cut_to_the_length_in_its_tokens(folder: Path) -> None:
    from infercore.benchmarks.serve import load_tokenizer, make_prompts

    tokenizer = load_tokenizer(str(folder))
    prompts = make_prompts(6, 48, False, VOCAB_SIZE, seed=0, tokenizer=tokenizer)
    # Decoding and encoding again may merge across the cut; the prompt stays within a token or two.
    lengths = [len(tokenizer.encode(p, add_special_tokens=False)) for p in prompts]
    assert all(46 <= n <= 48 for n in lengths), lengths
    assert len(set(prompts)) == 6
    assert make_prompts(2, 48, False, VOCAB_SIZE, seed=0)[0].count(" ") == 47  # no tokenizer: 48 words
