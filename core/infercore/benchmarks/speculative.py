"""Speculative decoding in the benchmarks: the options ``bench latency`` and ``bench throughput`` share,
and what the engine counted of drafts.

``--benchmark-acceptance-rate`` is for measuring the step at a chosen acceptance rate with random weights:
it sets the rejection sampler's benchmark switch on the runner of an in-process engine (no configuration
field or request parameter reaches it). ``--prompt-period`` repeats each prompt's first N tokens, so the
n-gram proposer finds earlier occurrences to draft from. The method ``bench_ngram_full``
(``infercore.benchmarks.full_drafts``) is the n-gram proposer topped up to ``k`` drafts per row.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from infercore.benchmarks.full_drafts import METHOD, register_full_drafts


def add_speculative_arguments(parser: argparse.ArgumentParser) -> None:
    """``--speculative-config``, ``--benchmark-acceptance-rate`` and ``--prompt-period``."""
    parser.add_argument("--speculative-config", type=json.loads, default=None, metavar="JSON",
                        help='speculative decoding, e.g. {"method": "ngram", "num_speculative_tokens": 3}')
    parser.add_argument("--benchmark-acceptance-rate", type=_rates, default=[None], metavar="P[,P...]",
                        help="benchmark only: accept every draft with probability P whatever the models say; "
                             "several rates run one after another in the same engine, a result line each")
    parser.add_argument("--prompt-period", type=int, default=None, metavar="N",
                        help="repeat each prompt's first N tokens (repeated spans for the n-gram proposer)")


def _rates(text: str) -> list[float | None]:
    """Comma-separated acceptance rates in [0, 1]."""
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None
    if not rates or any(not 0.0 <= rate <= 1.0 for rate in rates):
        raise argparse.ArgumentTypeError(f"acceptance rates must be in [0, 1] (got {text!r})")
    return list(rates)


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The ``LLM`` keyword arguments the options ask for."""
    if args.speculative_config is None:
        return {}
    if args.speculative_config.get("method") == METHOD:
        register_full_drafts()
    return {"speculative_config": args.speculative_config}


def periodic(prompt: list[int], period: int | None) -> list[int]:
    """``prompt`` with its first ``period`` tokens repeated to its length (unchanged without a period)."""
    if not period:
        return prompt
    return [prompt[i % period] for i in range(len(prompt))]


def force_acceptance_rate(llm: Any, rate: float | None) -> None:
    """Set the benchmark acceptance rate on the in-process engine's runner (the uniprocess executor)."""
    worker = getattr(llm.llm_engine.engine_core.executor, "worker", None)
    if worker is None:  # workers in processes of their own (tensor parallelism)
        if rate is None:
            return
        raise SystemExit("--benchmark-acceptance-rate needs the in-process engine (--tensor-parallel-size 1)")
    sampler = getattr(worker.runner, "sampler", None)
    if not hasattr(sampler, "benchmark_acceptance_rate"):
        if rate is None:
            return
        raise SystemExit("--benchmark-acceptance-rate needs --speculative-config (the sampler verifies no drafts)")
    sampler.benchmark_acceptance_rate = rate


def spec_decode_report(llm: Any, before: Any = None) -> dict[str, Any]:
    """The engine's draft counters (since ``before``, a ``SchedulerStats``, when given) for a result line."""
    stats = llm.llm_engine.engine_core.scheduler.get_stats()
    if not stats.spec_num_accepted_tokens_per_pos:
        return {}
    base = before if before is not None and before.spec_num_accepted_tokens_per_pos else None
    drafts = stats.spec_num_drafts - (base.spec_num_drafts if base else 0)
    tokens = stats.spec_num_draft_tokens - (base.spec_num_draft_tokens if base else 0)
    accepted = stats.spec_num_accepted_tokens - (base.spec_num_accepted_tokens if base else 0)
    per_pos = [n - (base.spec_num_accepted_tokens_per_pos[j] if base else 0)
               for j, n in enumerate(stats.spec_num_accepted_tokens_per_pos)]
    return {"spec_num_drafts": drafts, "spec_num_draft_tokens": tokens, "spec_num_accepted_tokens": accepted,
            "spec_acceptance_rate": round(accepted / tokens, 3) if tokens else None,
            "spec_mean_accepted_length": round(1 + accepted / drafts, 3) if drafts else None,
            "spec_accepted_per_pos": per_pos}
