"""How many prompt tokens a step may take while requests decode: a smaller step budget beside decodes
(``max_num_batched_tokens_while_decoding``) or one in proportion to them (``max_prefill_tokens_per_decode``),
so a decode never waits on a much longer step (bounded inter-token latency)."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable

from infercore.config import SchedulerConfig
from infercore.scheduler.request import Request

#: The fewest prompt tokens ``max_prefill_tokens_per_decode`` leaves a step beside decodes: a prompt of
#: typical length still prefills in one step when few requests decode.
MIN_PREFILL_TOKENS_WHILE_DECODING = 512
#: The proportional bound never holds a step's prompt tokens under this fraction of the prompt tokens still
#: to prefill (waiting and part-prefilled requests): a backlog of long prompts then drains in tens of steps
#: rather than thousands of small ones, each re-reading long contexts, while the few short arrivals the
#: bound is for stay under it.
PREFILL_BACKLOG_SHARE = 1 / 32


class PrefillBudget:
    """The scheduler's rule for prompt tokens beside decodes. The proportional bound stands aside at high
    load (``per_decode_bound_below_load``): there, holding prompts back leaves sequence slots idle and costs
    throughput that a full engine cannot make up."""

    def __init__(self, config: SchedulerConfig) -> None:
        #: Most prompt tokens a step takes while some request is decoding (None: the whole budget).
        self.max_num_batched_tokens_while_decoding = config.max_num_batched_tokens_while_decoding
        #: Most prompt tokens a step takes per decoding request (None: no such bound).
        self.max_prefill_tokens_per_decode = config.max_prefill_tokens_per_decode
        #: The per-decode bound applies while fewer requests than this are running or waiting.
        self.per_decode_bound_load = math.ceil(config.per_decode_bound_below_load * config.max_num_seqs)

    def allowed(self, budget: int, running: Collection[Request], waiting: Collection[Request]) -> int:
        """Prompt tokens this step may take out of ``budget``, given the running and waiting requests."""
        cap, per_decode = self.max_num_batched_tokens_while_decoding, self.max_prefill_tokens_per_decode
        if per_decode is not None and len(running) + len(waiting) >= self.per_decode_bound_load:
            per_decode = None
        if (cap is None or cap >= budget) and per_decode is None:
            return budget
        decoding = sum(1 for r in running if r.output_token_ids or r.num_output_placeholders)
        if not decoding:
            return budget
        allowed = budget if cap is None else max(cap - decoding, 0)
        if per_decode is not None:
            floor = max(MIN_PREFILL_TOKENS_WHILE_DECODING, int(prompt_backlog((running, waiting)) * PREFILL_BACKLOG_SHARE))
            allowed = min(allowed, max(per_decode * decoding, floor))
        return allowed


def prompt_backlog(queues: Iterable[Iterable[Request]]) -> int:
    """Prompt tokens not yet computed, over the requests of ``queues``."""
    return sum(max(r.num_prompt_tokens - r.num_computed_tokens, 0) for queue in queues for r in queue)
