"""Micro-benchmark: Python cost of schedule() + update_from_output() per pure-decode step.

Run: python tests/scheduler/bench_scheduler.py [--requests 256] [--steps 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from sched_fakes import kv_layout

from infercore.config import CacheConfig, SchedulerConfig
from infercore.sampling_params import SamplingParams
from infercore.scheduler.request import Request
from infercore.scheduler.scheduler import Scheduler
from infercore.wire.scheduler_output import ModelRunnerOutput


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--prompt-len", type=int, default=128)
    args = parser.parse_args()

    block_size = 16
    max_model_len = args.prompt_len + args.steps + 16
    blocks_per_req = -(-max_model_len // block_size)
    sched = Scheduler(
        SchedulerConfig(max_num_seqs=args.requests), CacheConfig(block_size=block_size),
        max_model_len=max_model_len, kv_layout=kv_layout(args.requests * blocks_per_req + 1, block_size),
        max_num_batched_tokens=max(8192, args.requests * args.prompt_len),
    )
    sp = SamplingParams(max_tokens=args.steps + 8, ignore_eos=True)
    for i in range(args.requests):
        prompt = [(i * 7919 + j) % 30000 + 3 for j in range(args.prompt_len)]
        sched.add_request(Request(f"req-{i}", prompt, sp, eos_token_id=2, arrival_time=float(i)))

    def runner_output(out):
        req_ids = out.req_ids
        return ModelRunnerOutput(req_ids, [[17] for _ in req_ids], None, None)

    out = sched.schedule()  # the prefill step
    sched.update_from_output(out, runner_output(out))

    t_sched: list[float] = []
    t_update: list[float] = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        out = sched.schedule()
        t1 = time.perf_counter()
        ro = runner_output(out)
        t2 = time.perf_counter()
        sched.update_from_output(out, ro)
        t3 = time.perf_counter()
        t_sched.append(t1 - t0)
        t_update.append(t3 - t2)
        assert len(out.num_scheduled_tokens) == args.requests
    print(f"{args.requests} running requests, {args.steps} decode steps")
    total = [a + b for a, b in zip(t_sched, t_update)]
    print("                      median     mean  (us/step; the median resists noise from other processes)")
    for name, times in (("schedule()", t_sched), ("update_from_output()", t_update), ("total", total)):
        print(f"{name:22s}{statistics.median(times) * 1e6:7.1f}  {statistics.fmean(times) * 1e6:7.1f}")


if __name__ == "__main__":
    main()
