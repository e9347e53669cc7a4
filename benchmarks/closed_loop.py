"""A server's load without the server: a closed loop of C requests through the offline engine, each finished
request replaced at once by a new one, with every step timed by its kind.

This is what `infercore bench serve --max-concurrency C` asks of the engine, minus HTTP: it shows what a
scheduler setting costs at full load and which steps the time goes to. Prints one JSON line per engine
setting: output tok/s of the timed pass (after an untimed warm-up pass) and, per step kind, the count, the
mean step time (from one ``schedule`` to the next) and the mean time ``execute_model`` held the loop (in async
mode it launches step N and collects step N-1, so it includes waits for the device).

Step kinds: ``decode`` (no prompt tokens), ``prompt<=N`` (prompt and decode tokens within
``max_mixed_graph_tokens`` N: replayed from graphs where the platform captures them), ``prompt>N`` (more
tokens, run eagerly), each with the number of decodes rounded down to a multiple of 64 (``D192`` holds
192-255 decodes).

    python benchmarks/closed_loop.py --concurrency 256 --num-requests 1024 \\
        --settings '[{}, {"max_prefill_tokens_per_decode": 32}]'
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from infercore import SamplingParams
from infercore.benchmarks.workloads import WORKLOADS
from infercore.config import InfercoreConfig
from infercore.frontend.llm_engine import LLMEngine


class StepClock:
    """Times an engine's steps by kind: wraps its scheduler's ``schedule`` and its executor's ``execute_model``."""

    def __init__(self, engine: LLMEngine) -> None:
        core = engine.engine_core
        self.graph_tokens = engine.config.model.max_mixed_graph_tokens
        self.marks: list[tuple[float, int, int]] = []  # (time, prompt tokens, decodes) per schedule
        self.execute: list[float] = []
        schedule, execute = core.scheduler.schedule, core.executor.execute_model

        def timed_schedule():  # noqa: ANN202
            out = schedule()
            counts = out.num_scheduled_tokens
            self.marks.append((time.perf_counter(), sum(n for n in counts if n > 1), sum(1 for n in counts if n == 1)))
            return out

        def timed_execute(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return execute(*args, **kwargs)
            finally:
                self.execute.append(time.perf_counter() - start)

        core.scheduler.schedule = timed_schedule
        core.executor.execute_model = timed_execute

    def reset(self) -> None:
        self.marks.clear()
        self.execute.clear()

    def kind(self, prompt_tokens: int, decodes: int) -> str:
        if prompt_tokens == 0:
            name = "decode"
        elif prompt_tokens + decodes <= self.graph_tokens:
            name = f"prompt<={self.graph_tokens}"
        else:
            name = f"prompt>{self.graph_tokens}"
        return f"{name}|D{decodes // 64 * 64}"

    def summary(self) -> dict[str, list[float]]:
        """Per kind: [steps, mean step ms, mean execute_model ms] (a step's time runs to the next schedule)."""
        steps: dict[str, list[float]] = defaultdict(list)
        held: dict[str, list[float]] = defaultdict(list)
        for (start, prompt, decodes), (end, _, _), execute in zip(self.marks, self.marks[1:], self.execute):
            kind = self.kind(prompt, decodes)
            steps[kind].append(end - start)
            held[kind].append(execute)
        return {kind: [len(times), round(1e3 * sum(times) / len(times), 2), round(1e3 * sum(held[kind]) / len(times), 2)]
                for kind, times in sorted(steps.items())}


def closed_loop(engine: LLMEngine, concurrency: int, num_requests: int, input_len: int, output_len: int,
                vocab: int, rnd: random.Random, tag: str, refill_delay_steps: int = 0) -> tuple[int, float]:
    """Keep ``concurrency`` requests in the engine until ``num_requests`` finished, each replacement added
    ``refill_delay_steps`` steps after the request it replaces finished (a server's round trip); returns
    (output tokens, seconds)."""
    params = SamplingParams(max_tokens=output_len, ignore_eos=True, temperature=0)
    sent = done = tokens = 0
    due: list[int] = []  # per pending replacement, the steps left before it is sent

    def send() -> None:
        nonlocal sent
        prompt = [rnd.randrange(100, vocab) for _ in range(input_len)]
        engine.add_request(f"{tag}-{sent}", {"prompt_token_ids": prompt}, params)
        sent += 1

    for _ in range(min(concurrency, num_requests)):
        send()
    start = time.perf_counter()
    while done < num_requests:
        outputs = engine.step()
        due = [steps - 1 for steps in due]
        while due and due[0] <= 0:
            due.pop(0)
            send()
        for out in outputs:
            if out.finished:
                done += 1
                tokens += len(out.outputs[0].token_ids)
                if sent + len(due) < num_requests:
                    if refill_delay_steps:
                        due.append(refill_delay_steps)
                    else:
                        send()
    return tokens, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="w-gpu", choices=sorted(WORKLOADS), help="whose model shape to load")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer, 64-wide model of the workload's shape")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--num-requests", type=int, default=1024)
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--engine-args", default="{}", help="JSON engine arguments common to every setting")
    parser.add_argument("--settings", default="[{}]", help="JSON list of engine-argument sets, one run each")
    parser.add_argument("--refill-delay-steps", type=int, nargs="+", default=[0],
                        help="steps between a request's finish and its replacement's arrival; one run each")
    args = parser.parse_args()

    workload = WORKLOADS[args.workload]
    if args.tiny:
        workload = workload.tiny()
    common = {"load_format": "dummy", "dtype": workload.dtype, "max_model_len": args.max_model_len,
              "skip_tokenizer_init": True, **json.loads(args.engine_args)}
    vocab = min(int(workload.model_config.get("vocab_size", 10240)), 10000)
    with tempfile.TemporaryDirectory() as tmp:
        folder = workload.write_model_folder(Path(tmp) / workload.name)
        for setting in json.loads(args.settings):
            engine = LLMEngine(InfercoreConfig.from_kwargs(model=str(folder), **common, **setting))
            clock = StepClock(engine)
            rnd = random.Random(0)
            closed_loop(engine, args.concurrency, args.num_requests, args.input_len, args.output_len, vocab, rnd, "warm")
            for delay in args.refill_delay_steps:
                clock.reset()
                tokens, seconds = closed_loop(engine, args.concurrency, args.num_requests, args.input_len,
                                              args.output_len, vocab, rnd, f"timed{delay}", delay)
                print(json.dumps({"setting": setting, "concurrency": args.concurrency, "requests": args.num_requests,
                                  "refill_delay_steps": delay, "output_tok_s": round(tokens / seconds),
                                  "steps": clock.summary()}), flush=True)
            engine.engine_core.shutdown()
            del engine, clock
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
