"""Time the n-gram proposer on one step's histories: rows x tokens of random text in which each row's
last tokens repeat an earlier stretch (so every row finds a match, the usual case in code and RAG).

    python benchmarks/ngram_proposer.py --rows 256 --tokens 2048
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from infercore.spec_decode.ngram import NgramProposer
from infercore.spec_decode.proposer import ProposerSpec
from infercore.speculative_config import SpeculativeConfig


def histories(rows: int, tokens: int, vocab: int, repeat: int, seed: int = 0) -> np.ndarray:
    """[rows, tokens] int32 random tokens whose last ``repeat`` tokens copy an earlier stretch."""
    rng = np.random.default_rng(seed)
    table = rng.integers(0, vocab, (rows, tokens), dtype=np.int32)
    starts = rng.integers(0, tokens - 2 * repeat, rows)
    copied = table[np.arange(rows)[:, None], starts[:, None] + np.arange(repeat)]
    table[:, tokens - repeat:] = copied
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=32000, help="token ids drawn from this many (fewer: more candidates)")
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument("--lookup", type=int, nargs=2, default=(1, 4), metavar=("MIN", "MAX"))
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args()
    config = SpeculativeConfig(method="ngram", num_speculative_tokens=args.k, prompt_lookup_min=args.lookup[0],
                               prompt_lookup_max=args.lookup[1])
    proposer = NgramProposer(ProposerSpec(config, args.vocab, args.rows, args.tokens))
    table = histories(args.rows, args.tokens, args.vocab, repeat=64)
    num_tokens = np.full(args.rows, args.tokens)
    num_drafts = np.full(args.rows, args.k)
    for _ in range(5):
        proposer.propose(token_ids=table, num_tokens=num_tokens, num_drafts=num_drafts)
    times = []
    for _ in range(args.iters):
        started = time.perf_counter()
        drafts = proposer.propose(token_ids=table, num_tokens=num_tokens, num_drafts=num_drafts)
        times.append(time.perf_counter() - started)
    micros = np.array(times) * 1e6
    print(f"ngram proposer, {args.rows} rows x {args.tokens} tokens, vocab {args.vocab}, k={args.k}, "
          f"lookup {args.lookup[0]}..{args.lookup[1]}: median {np.median(micros):.0f} us, "
          f"p10 {np.percentile(micros, 10):.0f} us per step; rows with drafts "
          f"{int((drafts.num_drafts > 0).sum())}/{args.rows}")


if __name__ == "__main__":
    main()
