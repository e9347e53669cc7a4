"""Prefill attention over the paged KV cache: the Triton kernel's launch configurations, as TFLOP/s.

Workload: one W-GPU prefill step (16 query / 8 KV heads of 128, bf16, blocks of 16 tokens): prompts
of ``--prompt-len`` tokens (w-gpu-prefill: 2,048), or of random lengths in [100, 1024] when it is 0,
until ``--tokens`` query tokens. Every configuration (block_m, block_n, warps, stages, packed heads)
is compiled first, in ``--jobs`` processes at once; then each is timed and checked against torch SDPA
on the same prompts made dense, which is also timed as a yardstick, as are the library's other kernels
(each SDPA backend over all prompts in one call, variable-length flash and cuDNN over the step's packed
fresh K/V, flash over the paged cache). Prints one JSON line per configuration, then the library lines,
then the fastest configuration and the default's time. Stops timing new configurations once
``--budget-s`` seconds have passed.

Example (w-gpu-prefill's attention)::

    python benchmarks/prefill_attention.py --prompt-len 2048 --tokens 16384
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
import triton
import triton.testing

from infercore_triton.prefill_attention import PrefillConfig, default_config, prefill_attention

DEVICE = "cuda"


@dataclass
class Step:
    """One prefill step's inputs over a paged cache, and the prompt lengths they hold."""

    lengths: list[int]
    q: torch.Tensor
    kv_cache: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor

    def run(self, config: PrefillConfig, out: torch.Tensor) -> torch.Tensor:
        """The Triton kernel over the step with ``config``."""
        return prefill_attention(self.q, self.kv_cache, self.query_start_loc, self.seq_lens, self.block_table,
                                 self.q.shape[-1] ** -0.5, out, max(self.lengths), config=config)


def _make_step(args: argparse.Namespace) -> Step:
    torch.manual_seed(0)
    dtype, dev = torch.bfloat16, DEVICE
    h, kvh, d, bs = args.heads, args.kv_heads, args.head_size, args.block_size
    lengths: list[int] = []
    while sum(lengths) < args.tokens:
        lengths.append(args.prompt_len or int(torch.randint(100, 1025, ()).item()))
    lengths[-1] -= sum(lengths) - args.tokens
    n = len(lengths)
    width = triton.cdiv(max(lengths), bs)
    kv_cache = torch.randn((2, n * width + 1, bs, kvh, d), dtype=dtype, device=dev)
    # Each prompt's blocks in a shuffled order, as a long-running cache hands them out.
    block_table = (1 + torch.randperm(n * width, device=dev)).view(n, width).to(torch.int32)
    seq_lens = torch.tensor(lengths, dtype=torch.int32, device=dev)
    query_start_loc = torch.zeros(n + 1, dtype=torch.int32, device=dev)
    query_start_loc[1:] = torch.cumsum(seq_lens, 0)
    q = torch.randn((args.tokens, h, d), dtype=dtype, device=dev)
    return Step(lengths, q, kv_cache, block_table, seq_lens, query_start_loc)


def _dense_kv(step: Step) -> tuple[torch.Tensor, torch.Tensor]:
    """Each prompt's K and V gathered from the paged cache: [prompts, heads, tokens, head_size]."""
    n, width = step.block_table.shape
    bs, kvh, d = step.kv_cache.shape[2:]
    k, v = (step.kv_cache[i][step.block_table.long()].view(n, width * bs, kvh, d).transpose(1, 2) for i in (0, 1))
    return k, v


def _sdpa(step: Step, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None = None) -> None:
    """torch SDPA (causal, GQA) one prompt at a time; the outputs go to ``out`` when it is given."""
    starts = step.query_start_loc.tolist()
    for i, length in enumerate(step.lengths):
        qi = step.q[starts[i]: starts[i] + length].transpose(0, 1).unsqueeze(0)
        oi = F.scaled_dot_product_attention(qi, k[i:i + 1, :, :length], v[i:i + 1, :, :length], is_causal=True,
                                            enable_gqa=True)
        if out is not None:
            out[starts[i]: starts[i] + length] = oi[0].transpose(0, 1)


def _sdpa_batched(step: Step, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """torch SDPA over every prompt in one call (prompts of one length), K/V expanded to the query heads
    (not every backend takes GQA): [prompts, heads, length, head_size]."""
    length, heads = step.lengths[0], step.q.shape[1]
    q = step.q.view(len(step.lengths), length, heads, -1).transpose(1, 2)
    group = heads // k.shape[1]
    k, v = (t[:, :, :length].repeat_interleave(group, dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _packed_kv(step: Step, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each prompt's K and V as the step computed them, packed token after token: [tokens, kv_heads, head_size]
    (what a kernel over the step's fresh K/V would read instead of the paged cache)."""
    parts = [(k[i, :, :length].transpose(0, 1), v[i, :, :length].transpose(0, 1)) for i, length in enumerate(step.lengths)]
    return torch.cat([p[0] for p in parts]).contiguous(), torch.cat([p[1] for p in parts]).contiguous()


def _varlen_calls(step: Step, k: torch.Tensor, v: torch.Tensor) -> dict[str, object]:
    """The library's variable-length kernels over the step's packed fresh K/V (and FA2 over the paged cache),
    each a function returning [tokens, heads, head_size]: the candidates for a fresh-prompt prefill path."""
    kp, vp = _packed_kv(step, k, v)
    group = step.q.shape[1] // kp.shape[1]
    ke, ve = kp.repeat_interleave(group, dim=1), vp.repeat_interleave(group, dim=1)
    cu = step.query_start_loc.to(torch.int32)
    longest = max(step.lengths)
    scale = step.q.shape[-1] ** -0.5
    calls: dict[str, object] = {}
    with contextlib.suppress(ImportError):
        from torch.nn.attention.varlen import varlen_attn

        calls["torch varlen_attn (flash), fresh K/V, GQA"] = lambda: varlen_attn(
            step.q, kp, vp, cu, cu, longest, longest, scale=scale, window_size=(-1, 0), enable_gqa=True)
        calls["torch varlen_attn (flash), fresh K/V, heads expanded"] = lambda: varlen_attn(
            step.q, ke, ve, cu, cu, longest, longest, scale=scale, window_size=(-1, 0))
    aten = torch.ops.aten
    calls["aten._flash_attention_forward, paged cache"] = lambda: aten._flash_attention_forward(
        step.q, step.kv_cache[0], step.kv_cache[1], cu, cu, longest, longest, 0.0, True, False, scale=scale,
        seqused_k=step.seq_lens.to(torch.int32), block_table=step.block_table.to(torch.int32))[0]
    calls["aten._cudnn_attention_forward, fresh K/V, GQA"] = lambda: aten._cudnn_attention_forward(
        step.q, kp, vp, None, cu, cu, longest, longest, False, 0.0, True, False, scale=scale)[0]
    calls["aten._cudnn_attention_forward, fresh K/V, heads expanded"] = lambda: aten._cudnn_attention_forward(
        step.q, ke, ve, None, cu, cu, longest, longest, False, 0.0, True, False, scale=scale)[0]
    return calls


def _library_kernels(step: Step, k: torch.Tensor, v: torch.Tensor, ref: torch.Tensor, flops: float) -> None:
    """One line per library kernel: torch SDPA's backends over all prompts in one call (prompts of one length,
    K/V expanded to the query heads: not every backend takes GQA), then the variable-length kernels of
    :func:`_varlen_calls`. The yardsticks a library sets for the Triton kernel, and candidates to call."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    calls: dict[str, object] = {}
    if len(set(step.lengths)) == 1:
        shape = ref.shape
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
            def call(backend: SDPBackend = backend) -> torch.Tensor:
                with sdpa_kernel(backend):
                    return _sdpa_batched(step, k, v).transpose(1, 2).reshape(shape)
            calls[f"torch sdpa {backend.name.lower()}, all prompts in one call"] = call
    calls.update(_varlen_calls(step, k, v))
    for name, call in calls.items():
        line: dict[str, object] = {"engine": name}
        try:
            line["rel_err"] = round(_rel_err(call(), ref), 5)
            us = _median_us(call)
        except Exception as exc:  # noqa: BLE001 - a kernel that refuses these shapes or is not built
            print(json.dumps({**line, "error": f"{type(exc).__name__}: {str(exc)[:160]}"}), flush=True)
            continue
        print(json.dumps({**line, "us": round(us, 1), "TFLOPs": round(flops / us / 1e6, 1)}), flush=True)


def _configs() -> list[PrefillConfig]:
    """The sweep, likeliest first: the old kernel's launch, every Hopper-sized tile with heads packed and
    a request's m-blocks launched together, the stage-3 ones again in the old launch order, a few unpacked."""
    tiles = list(itertools.product((128, 64), (64, 128, 32), (8, 4)))
    inner = [PrefillConfig(m, n, w, s) for (m, n, w), s in itertools.product(tiles, (3, 2, 4))]
    outer = [PrefillConfig(m, n, w, 3, m_blocks_inner=False) for m, n, w in tiles]
    unpacked = [PrefillConfig(m, n, w, 3, pack_heads=False) for m, n, w in itertools.product((64, 128), (32, 64), (4, 8))]
    old = PrefillConfig(pack_heads=False, m_blocks_inner=False)
    return list(dict.fromkeys([old, *inner, *outer, *unpacked]))


def _median_us(fn) -> float:  # noqa: ANN001
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def _compile_in_parallel(args: argparse.Namespace, deadline: float) -> None:
    """Fill Triton's on-disk cache with every configuration's kernel, ``--jobs`` processes at once."""
    base = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--shards", str(args.jobs)]
    procs = [subprocess.Popen([*base, "--shard", str(i)], stdout=subprocess.DEVNULL) for i in range(args.jobs)]
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _compile_shard(args: argparse.Namespace, step: Step) -> None:
    out = torch.empty_like(step.q)
    for config in _configs()[args.shard::args.shards]:
        # A tile that does not fit in shared memory raises; the timing pass reports it.
        with contextlib.suppress(Exception):
            step.run(config, out)
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--prompt-len", type=int, default=0, help="fixed prompt length; 0: random in [100, 1024]")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-size", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--layers", type=int, default=28, help="attention layers per step (the summary's total)")
    parser.add_argument("--jobs", type=int, default=min(12, os.cpu_count() or 1), help="compiling processes")
    parser.add_argument("--budget-s", type=float, default=110.0, help="stop timing new configurations after this")
    parser.add_argument("--default-only", action="store_true", help="time only the shipped launch, not the sweep")
    parser.add_argument("--shard", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--shards", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a GPU that torch can see")
    began = time.monotonic()
    step = _make_step(args)
    if args.shard >= 0:
        _compile_shard(args, step)
        return
    if args.jobs > 1 and not args.default_only:
        _compile_in_parallel(args, began + args.budget_s / 2)
    h, d = args.heads, args.head_size
    flops = sum(4 * h * d * length * (length + 1) / 2 for length in step.lengths)
    head = {"benchmark": "prefill_attention", "tokens": args.tokens, "prompts": len(step.lengths),
            "prompt_len": args.prompt_len or "random 100-1024", "heads": h, "kv_heads": args.kv_heads,
            "head_size": d, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "compiled_s": round(time.monotonic() - began, 1)}
    print(json.dumps(head), flush=True)
    k, v = _dense_kv(step)
    ref = torch.empty_like(step.q)
    _sdpa(step, k, v, ref)
    out = torch.empty_like(step.q)
    results: dict[PrefillConfig, float] = {}
    configs = [default_config(h // args.kv_heads, d, step.q.device)] if args.default_only else _configs()
    for config in configs:
        if time.monotonic() - began > args.budget_s:
            print(json.dumps({"stopped": "budget spent", "untimed": len(configs) - len(results)}), flush=True)
            break
        line = {"config": asdict(config)}
        try:
            out.fill_(float("nan"))
            line["rel_err"] = round(_rel_err(step.run(config, out), ref), 5)
            us = _median_us(lambda config=config: step.run(config, out))
        except Exception as exc:  # noqa: BLE001 - out of shared memory or registers for this tile
            print(json.dumps({**line, "error": f"{type(exc).__name__}: {str(exc)[:120]}"}), flush=True)
            continue
        results[config] = us
        print(json.dumps({**line, "us": round(us, 1), "TFLOPs": round(flops / us / 1e6, 1)}), flush=True)
    us = _median_us(lambda: _sdpa(step, k, v))
    print(json.dumps({"engine": "torch sdpa, dense, one call per prompt", "us": round(us, 1),
                      "TFLOPs": round(flops / us / 1e6, 1)}), flush=True)
    _library_kernels(step, k, v, ref, flops)
    if results:
        best = min(results, key=results.__getitem__)
        shipped = default_config(h // args.kv_heads, d, step.q.device)
        print(json.dumps({"best": asdict(best), "us": round(results[best], 1),
                          "TFLOPs": round(flops / results[best] / 1e6, 1),
                          f"ms_per_step_x{args.layers}_layers": round(results[best] * args.layers / 1e3, 2),
                          "table_key": [h // args.kv_heads, triton.next_power_of_2(d)],
                          "default": asdict(shipped), "default_us": round(results[shipped], 1) if shipped in results else None,
                          "total_s": round(time.monotonic() - began, 1)}), flush=True)


if __name__ == "__main__":
    main()
