"""A trace of what each pipeline stage runs when: one JSON line per step and rank.

Set ``INFERCORE_PP_TRACE`` to a folder and every worker appends to ``rank<N>.jsonl`` there, for each
step it runs: its stage, the first of the step's request ids, when the step's call started, when its
input was there (the hand-over from the stage before received; the start on the first stage) and when
it finished (monotonic clock seconds, comparable across the processes of one host). Two stages busy
with different steps at once is what micro-batching is for, and the trace shows it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from infercore.layers.pipeline_parallel import get_pp_state
from infercore.wire.scheduler_output import SchedulerOutput

TRACE_ENV = "INFERCORE_PP_TRACE"


class StageTrace:
    """Appends one line per step to this rank's trace file (a no-op unless ``INFERCORE_PP_TRACE`` is set)."""

    def __init__(self, rank: int) -> None:
        folder = os.environ.get(TRACE_ENV)
        self.path = Path(folder) / f"rank{rank}.jsonl" if folder else None
        self.rank = rank
        self._start = 0.0

    def begin(self) -> None:
        if self.path is not None:
            self._start = time.monotonic()
            get_pp_state().last_recv = 0.0

    def end(self, so: SchedulerOutput) -> None:
        if self.path is None or not so.total_num_scheduled_tokens:
            return
        pp = get_pp_state()
        line = {"rank": self.rank, "stage": pp.rank, "first_req": so.req_ids[0], "num_reqs": len(so.req_ids),
                "start": self._start, "input": pp.last_recv or self._start, "end": time.monotonic()}
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")
