#!/usr/bin/env python3
"""Write a Hugging Face tokenizer folder with exactly ``--vocab-size`` tokens, in seconds, offline.

Benchmark clients that count tokens themselves (aiperf) need a tokenizer, and a dummy-weight model of a
real shape has none: this trains a small byte-level BPE on the tiny models' corpus, then adds merges of
pairs of its tokens until every id below the model's vocab size is a token. Every id a random-weight model
emits then decodes to text, and text encodes to a realistic number of tokens.

    python3 scripts/make_bench_tokenizer.py /tmp/w-gpu-tokenizer --vocab-size 151936
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

#: Tokens learnt from the corpus before the synthetic merges fill the vocabulary up.
BASE_VOCAB = 2048


def _merge_pair(merge: str | list[str]) -> tuple[str, str]:
    if isinstance(merge, str):
        left, right = merge.split(" ", 1)
        return left, right
    return merge[0], merge[1]


def fill_vocab(document: dict, vocab_size: int) -> dict:
    """Add merges of pairs of existing tokens to a BPE ``tokenizer.json`` document until it holds
    ``vocab_size`` tokens (added tokens included), each new token taking the next free id."""
    model = document["model"]
    vocab: dict[str, int] = model["vocab"]
    added = {token["content"]: token["id"] for token in document.get("added_tokens", [])}
    special = set(added)
    taken = set(vocab.values()) | set(added.values())
    needed = vocab_size - len(taken)
    if needed < 0:
        raise ValueError(f"the trained tokenizer already has {len(taken)} tokens, more than {vocab_size}")
    as_lists = bool(model["merges"]) and not isinstance(model["merges"][0], str)
    parts = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1]) if token not in special]
    next_id = max(taken) + 1
    for left, right in itertools.product(parts, parts):
        if needed == 0:
            break
        token = left + right
        if token in vocab or token in added:
            continue
        vocab[token] = next_id
        model["merges"].append([left, right] if as_lists else f"{left} {right}")
        next_id += 1
        needed -= 1
    if needed:
        raise ValueError(f"could not make {vocab_size} tokens from {len(parts)} base tokens")
    return document


def build(path: Path, vocab_size: int) -> Path:
    """Train the base tokenizer into ``path`` and fill its vocabulary to ``vocab_size``."""
    from infercore.tiny_models import build_tokenizer

    # No added tokens beyond the special ones: they would sit between the learnt and the filled ids.
    build_tokenizer(path, vocab_size=min(BASE_VOCAB, vocab_size // 2), added_tokens=[])
    tokenizer_json = path / "tokenizer.json"
    document = fill_vocab(json.loads(tokenizer_json.read_text()), vocab_size)
    tokenizer_json.write_text(json.dumps(document, ensure_ascii=False))
    return path


def main(argv: list[str] | None = None) -> int:
    """Write the folder; report its size as one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="folder to write (created)")
    parser.add_argument("--vocab-size", type=int, required=True,
                        help="tokens in all: the served model's vocab_size (151936 for W-GPU)")
    args = parser.parse_args(argv)
    if args.vocab_size < 1024:
        print("make_bench_tokenizer: --vocab-size must be at least 1024", file=sys.stderr)
        return 2
    build(args.path, args.vocab_size)
    from transformers import AutoTokenizer

    size = len(AutoTokenizer.from_pretrained(str(args.path)))
    print(json.dumps({"tokenizer": str(args.path), "vocab_size": size}))
    return 0 if size == args.vocab_size else 1


if __name__ == "__main__":
    sys.exit(main())
