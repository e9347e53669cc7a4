"""Where a speculative engine's throughput goes at c = 256: W-GPU-8B's requests through ``LLM.generate``
without speculation and with each method at ``disable_by_batch_size``'s default, every engine step timed and
bucketed by how many requests were running (busy steps, at or above the limit, draft nothing), and one window
of busy steps under the torch profiler (device time per kernel). JSON lines out.

    python scripts/gpu_spec_steps.py [--methods eagle3,draft_model] [--k 3] [--rate 0.7] [--window 200,20]

``--log-small`` also prints every small step (fewer running requests than the limit): its running count, wall
milliseconds and the draft side's passes in it, each timed between device syncs (:func:`log_draft_passes`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from infercore import LLM
from infercore.benchmarks.full_drafts import register_full_drafts
from infercore.benchmarks.kernel_timing import heaviest, kernel_totals
from infercore.benchmarks.spec_folders import speculative_config, write_folders
from infercore.benchmarks.speculative import force_acceptance_rate, periodic
from infercore.benchmarks.workloads import WORKLOADS
from infercore.engine.core import EngineCore
from infercore.speculative_config import DEFAULT_DISABLE_BY_BATCH_SIZE


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class StepClock:
    """Times every ``EngineCore.step`` of one engine and profiles steps ``first .. first + count``."""

    def __init__(self, core: EngineCore, limit: int, first: int, count: int, draft_log: list[Any] | None = None,
                 small_first: bool = False) -> None:
        self.core, self.limit, self.first, self.count = core, limit, first, count
        #: With ``small_first``, ``first`` counts small steps only (the profile starts at the first-th small step).
        self.small_first = small_first
        self.n_small = 0
        #: Wall milliseconds of the small steps, by running count.
        self.small_ms: dict[int, list[float]] = defaultdict(list)
        self.buckets: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        #: With ``draft_log`` (:func:`log_draft_passes`' log): per small step, (running, wall ms, its draft passes).
        self.small: list[tuple[int, float, list[Any]]] = []
        self.n = 0
        self.first_profiled = 0
        self.prof: Any = None
        self.kernels: dict[str, list[float]] = {}
        original = core.step

        def timed() -> Any:
            running = len(core.scheduler.running)
            at = self.n_small if self.small_first else self.n
            if at == self.first and (running < limit or not small_first):
                _sync()
                self.prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
                self.prof.__enter__()
                self.first_profiled = self.n
            mark = len(draft_log) if draft_log is not None else 0
            start = time.perf_counter()
            out = original()
            wall = time.perf_counter() - start
            if running < limit:
                self.small_ms[running].append(wall * 1000)
                self.n_small += 1
                if draft_log is not None:
                    self.small.append((running, round(wall * 1000, 2), draft_log[mark:]))
            bucket = self.buckets["busy" if running >= limit else "small"]
            bucket[0] += 1
            bucket[1] += wall
            self.n += 1
            if self.prof is not None and self.n == self.first_profiled + self.count:
                _sync()
                self.prof.__exit__(None, None, None)
                self.kernels = kernel_totals(self.prof.events(), width=80)
                self.prof = None
            return out

        core.step = timed  # type: ignore[method-assign]


def log_draft_passes() -> list[list[Any]]:
    """Record the draft side's work, each timed between device syncs (which perturbs the overlap; this is for
    finding the slow pass): ``["catch_up", rows, tokens, graph size or None, ms]``, ``["chain", rows, graph size
    or None, ms]``, ``["launch_drafts", "fell back"]`` (no lookahead room: drafting after the tokens arrive) and
    ``["propose_step", rows]`` (that later drafting)."""
    from infercore.spec_decode.model_proposer import ModelProposer
    from infercore.worker.draft_runner import DraftRunner
    from infercore.worker.draft_steps import DraftSteps

    log: list[list[Any]] = []

    def timed(record: list[Any], call: Any) -> Any:
        _sync()
        start = time.perf_counter()
        out = call()
        _sync()
        log.append([*record, round((time.perf_counter() - start) * 1000, 3)])
        return out

    catch_up, chain = DraftRunner.catch_up, DraftSteps.run
    launch, propose = ModelProposer.launch_drafts, ModelProposer.propose_step

    def logged_catch_up(self: DraftRunner, rows: Any, query_lens: Any, seq_lens: Any, positions: Any, *args: Any,
                        **kwargs: Any) -> Any:
        graphs = self.catch_up_graphs
        size = graphs.size_for(len(positions), len(rows)) if graphs is not None else None
        return timed(["catch_up", len(rows), len(positions), size],
                     lambda: catch_up(self, rows, query_lens, seq_lens, positions, *args, **kwargs))

    def logged_chain(self: DraftSteps, rows: Any, *args: Any, **kwargs: Any) -> Any:
        return timed(["chain", len(rows), self.graph_size(len(rows))], lambda: chain(self, rows, *args, **kwargs))

    def logged_launch(self: ModelProposer, *args: Any, **kwargs: Any) -> Any:
        out = launch(self, *args, **kwargs)
        if out is None:
            log.append(["launch_drafts", "fell back"])
        return out

    def logged_propose(self: ModelProposer, batch: Any, layout: Any, req_ids: list[str], *args: Any,
                       **kwargs: Any) -> Any:
        log.append(["propose_step", len(req_ids)])
        return propose(self, batch, layout, req_ids, *args, **kwargs)

    DraftRunner.catch_up = logged_catch_up  # type: ignore[method-assign]
    DraftSteps.run = logged_chain  # type: ignore[method-assign]
    ModelProposer.launch_drafts = logged_launch  # type: ignore[method-assign]
    ModelProposer.propose_step = logged_propose  # type: ignore[method-assign]
    return log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workload", default="w-gpu-8b")
    parser.add_argument("--methods", default="eagle3,draft_model")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--rate", type=float, default=0.7)
    parser.add_argument("--draft-workload", default="w-gpu", help="the draft model's shape")
    parser.add_argument("--num-requests", type=int, default=None)
    parser.add_argument("--no-plain", action="store_true", help="only the speculative engines")
    parser.add_argument("--window", default="200,20", help="first profiled engine step, number of steps; "
                        "small+N,COUNT starts at the N-th small step")
    parser.add_argument("--log-small", action="store_true", help="print every small step (see above)")
    args = parser.parse_args()
    draft_log = log_draft_passes() if args.log_small else None
    register_full_drafts()
    start_at, count_text = args.window.split(",")
    small_first = start_at.startswith("small+")
    first, count = int(start_at.removeprefix("small+")), int(count_text)
    workload = WORKLOADS[args.workload]
    prompts, max_tokens = workload.requests(0)
    if args.num_requests:
        prompts, max_tokens = prompts[: args.num_requests], max_tokens[: args.num_requests]
    prompts = [periodic(p, 64) for p in prompts]
    params = workload.sampling_params(max_tokens, 0)
    with tempfile.TemporaryDirectory() as tmp:
        folders = write_folders(Path(tmp), args.workload, args.draft_workload)
        folder = workload.write_model_folder(Path(tmp) / workload.name)
        runs: list[tuple[str, dict | None]] = [] if args.no_plain else [("plain", None)]
        runs += [(method, speculative_config(method, args.k, folders)) for method in args.methods.split(",")]
        for label, spec in runs:
            llm = LLM(model=str(folder), load_format="dummy", dtype=workload.dtype,
                      max_model_len=workload.max_model_len, skip_tokenizer_init=True, **workload.engine_kwargs,
                      **({"speculative_config": spec} if spec else {}))
            if spec:
                force_acceptance_rate(llm, args.rate)
            core = llm.llm_engine.engine_core
            limit = core.scheduler.speculative_config.disable_by_batch_size if spec else DEFAULT_DISABLE_BY_BATCH_SIZE
            llm.generate([{"prompt_token_ids": p} for p in prompts[:4]], params[:4], use_tqdm=False)
            clock = StepClock(core, limit or 10**9, first, count, draft_log, small_first)
            llm.reset_prefix_cache()
            start = time.perf_counter()
            outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
            wall = time.perf_counter() - start
            tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
            print(json.dumps({"label": label, "wall_s": round(wall, 3), "output_tok_s": round(tokens / wall, 1),
                              "steps": {b: [n, round(t, 3)] for b, (n, t) in clock.buckets.items()}}), flush=True)
            for running, ms, passes in clock.small:
                print(json.dumps({"label": label, "small_step": running, "ms": ms, "draft_passes": passes}),
                      flush=True)
            by_running = {b: round(sum(v) / len(v), 2) for b, v in sorted(clock.small_ms.items())}
            print(json.dumps({"label": label, "small_ms_by_running": by_running}), flush=True)
            total = sum(us for _, us in clock.kernels.values())
            print(json.dumps({"label": label, "window_device_ms": round(total / 1000, 2)}), flush=True)
            for name, n, ms in heaviest(clock.kernels, 25):
                print(json.dumps({"label": label, "kernel": name, "count": n, "ms": ms}), flush=True)
            del llm
            if torch.cuda.is_available():
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
