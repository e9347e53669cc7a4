"""A workload's schedule without a model: the real scheduler's steps, each timed by a roofline.

Runs a named workload's requests (default ``w-gpu-long``) through :class:`~infercore.scheduler.scheduler.Scheduler`
with a stand-in runner that samples one token wherever a step reaches the end of a request's known tokens,
and prices every step as a GPU would run it at the rates of :mod:`infercore.benchmarks.flops`: the linear
layers at ``H200_GEMM_FLOPS`` (never faster than reading the weights once), the prompt chunks' causal
attention at ``H200_LONG_PREFILL_ATTENTION_FLOPS``, and the decodes' context reads at ``H200_HBM_BYTES_PER_S``.
The model assumes every kernel reaches those rates at every size, so its total against the workload's own
estimate shows what the schedule alone costs (steps, chunk sizes, decodes re-reading long contexts beside
small chunks); a measured run's gap to it is the kernels' and the host's. Prints one JSON line, with the steps
grouped by their prompt tokens.

    python benchmarks/schedule_model.py --workload w-gpu-long [--max-prefill-tokens-per-decode none]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import Any

from infercore.benchmarks import flops
from infercore.benchmarks.workloads import WORKLOADS, Workload
from infercore.config import CacheConfig, SchedulerConfig
from infercore.kv_cache.groups import KVCacheGroup, kv_cache_layout
from infercore.sampling_params import SamplingParams
from infercore.scheduler.request import Request
from infercore.scheduler.scheduler import Scheduler
from infercore.wire.scheduler_output import ModelRunnerOutput, SchedulerOutput

#: Steps are grouped by their prompt tokens: none (pure decode), under this many, and the rest.
SMALL_CHUNK = 4096


@dataclass
class StepCost:
    """Seconds of one modelled step, by part."""

    linear: float
    attention: float
    kv_read: float

    @property
    def total(self) -> float:
        return self.linear + self.attention + self.kv_read


@dataclass
class Group:
    """The modelled steps of one kind."""

    steps: int = 0
    prompt_tokens: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: {"linear": 0.0, "attention": 0.0, "kv_read": 0.0})

    def add(self, prompt_tokens: int, cost: StepCost) -> None:
        self.steps += 1
        self.prompt_tokens += prompt_tokens
        for part in self.seconds:
            self.seconds[part] += getattr(cost, part)

    def report(self) -> dict[str, Any]:
        return {"steps": self.steps, "prompt_tokens": self.prompt_tokens,
                "seconds": round(sum(self.seconds.values()), 3),
                **{f"{part}_s": round(value, 3) for part, value in self.seconds.items()}}


class RooflineSteps:
    """Prices a step of the model ``config`` from what it schedules (see the module's doc)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.params = (flops.linear_params_per_layer(config) * config["num_hidden_layers"]
                       + config["vocab_size"] * config["hidden_size"])
        head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        self.attention_per_pair = 4 * head_dim * config["num_attention_heads"] * config["num_hidden_layers"]
        self.kv_bytes = flops.kv_bytes_per_token(config)

    def cost(self, tokens: int, chunks: list[tuple[int, int]], decode_context: int) -> StepCost:
        """``tokens`` in all; ``chunks`` as (tokens already computed, tokens this step) per prompt chunk; the
        decodes read ``decode_context`` context tokens in all."""
        pairs = sum(num * start + num * (num + 1) / 2 for start, num in chunks)
        return StepCost(
            linear=max(2 * self.params * tokens / flops.H200_GEMM_FLOPS, 2 * self.params / flops.H200_HBM_BYTES_PER_S),
            attention=self.attention_per_pair * pairs / flops.H200_LONG_PREFILL_ATTENTION_FLOPS,
            kv_read=decode_context * self.kv_bytes / flops.H200_HBM_BYTES_PER_S)


def make_scheduler(workload: Workload, budget: int, per_decode: int | None, max_num_seqs: int,
                   block_size: int = 16) -> Scheduler:
    """A scheduler as the engine builds one on a GPU (its default token budget there), with a KV cache that
    holds every request at once."""
    longest = workload.prompt_len[1] + workload.output_len[1]
    num_blocks = workload.num_requests * (longest // block_size + 1) + 1
    layout = kv_cache_layout([KVCacheGroup(None, (0,))], num_blocks, block_size=block_size,
                             max_num_seqs=max_num_seqs, max_num_batched_tokens=budget)
    return Scheduler(SchedulerConfig(max_num_seqs=max_num_seqs, max_prefill_tokens_per_decode=per_decode),
                     CacheConfig(block_size=block_size, enable_prefix_caching=True),
                     max_model_len=workload.max_model_len, kv_layout=layout, max_num_batched_tokens=budget)


def _sampled(out: SchedulerOutput, requests: dict[str, Request]) -> tuple[list[str], list[list[int]]]:
    """One token for each request whose known tokens this step reaches the end of."""
    req_ids, tokens = [], []
    for rid in out.req_ids:
        request = requests[rid]
        done = request.num_computed_tokens >= request.num_prompt_tokens + len(request.output_token_ids)
        req_ids.append(rid)
        tokens.append([1] if done else [])
    return req_ids, tokens


def model_schedule(workload: Workload, budget: int = 16384, per_decode: int | None = 16,
                   max_num_seqs: int = 256) -> dict[str, Any]:
    """Run ``workload``'s requests through the scheduler and the roofline; the JSON record."""
    prompts, outputs = workload.requests()
    scheduler = make_scheduler(workload, budget, per_decode, max_num_seqs)
    requests: dict[str, Request] = {}
    for i, (prompt, max_tokens) in enumerate(zip(prompts, outputs, strict=True)):
        request = Request(f"r{i}", prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True), eos_token_id=None)
        requests[request.request_id] = request
        scheduler.add_request(request)
    roofline = RooflineSteps(workload.model_config)
    groups = {"pure_decode": Group(), f"prompt_under_{SMALL_CHUNK}": Group(), f"prompt_{SMALL_CHUNK}_up": Group()}
    while scheduler.running or scheduler.waiting:
        out = scheduler.schedule()
        chunks: list[tuple[int, int]] = []
        decode_context = 0
        for rid, num in zip(out.req_ids, out.num_scheduled_tokens, strict=True):
            request = requests[rid]
            start = request.num_computed_tokens - num  # the scheduler has counted this step in already
            if num == 1 and start >= request.num_prompt_tokens:
                decode_context += start + 1
            else:
                chunks.append((start, num))
        prompt_tokens = sum(num for _, num in chunks)
        cost = roofline.cost(out.total_num_scheduled_tokens, chunks, decode_context)
        key = ("pure_decode" if not prompt_tokens else
               f"prompt_under_{SMALL_CHUNK}" if prompt_tokens < SMALL_CHUNK else f"prompt_{SMALL_CHUNK}_up")
        groups[key].add(prompt_tokens, cost)
        req_ids, tokens = _sampled(out, requests)
        scheduler.update_from_output(out, ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=tokens,
                                                            logprobs=None, prompt_logprobs=None))
    modelled = sum(sum(g.seconds.values()) for g in groups.values())
    estimate = flops.long_context_estimate_s(workload.model_config, [len(p) for p in prompts], outputs)
    return {"benchmark": "schedule_model", "workload": workload.name, "budget": budget,
            "max_prefill_tokens_per_decode": per_decode, "steps": sum(g.steps for g in groups.values()),
            "modelled_s": round(modelled, 3), "estimate_s": round(estimate, 3),
            "modelled_over_estimate": round(modelled / estimate, 3),
            "groups": {name: group.report() for name, group in groups.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="w-gpu-long", choices=sorted(WORKLOADS))
    parser.add_argument("--budget", type=int, default=16384, help="tokens per step (the GPU default)")
    parser.add_argument("--max-prefill-tokens-per-decode", default="16",
                        help="the scheduler's per-decode bound on prompt tokens, or 'none'")
    parser.add_argument("--max-num-seqs", type=int, default=256)
    args = parser.parse_args()
    bound = None if args.max_prefill_tokens_per_decode == "none" else int(args.max_prefill_tokens_per_decode)
    print(json.dumps(model_schedule(WORKLOADS[args.workload], args.budget, bound, args.max_num_seqs)), flush=True)


if __name__ == "__main__":
    main()
