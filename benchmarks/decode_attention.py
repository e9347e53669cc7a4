"""Decode attention over the paged KV cache: Triton kernel against torch SDPA, as bytes of KV per second.

Prints one JSON line (and, with ``--sweep``, a table of launch configurations first). Workload:
batch 256 x context 1024, 16 query / 8 KV heads of 128, bf16, blocks of 16 tokens in shuffled order.
The ceiling is the 4.3 TB/s device-to-device copy bandwidth measured on an H200 (BENCHMARKS.md).

``--kv-cache-dtype fp8`` stores the cache as e4m3 (written by the cache-write kernel with k/v scales):
the bytes counted are the fp8 cache's (half of bf16's), and the reference is SDPA over the
dequantized cache. ``--sweep`` also times each setting on a W-GPU-like ragged batch (contexts 100-2,048 in
a 4,096-token table, longest first), since equal contexts can crown a setting the engine's batches punish;
``--ragged LOW:HIGH:WIDTH`` times split counts and settings on such a batch alone (either cache dtype).
``--split-sweep B1,B2,...`` times both tile widths at every split count on such a batch (W-GPU's contexts
unless ``--ragged`` gives others) for each batch size, one JSON line per batch with the engine's choice and the
fastest: what ``PROGRAMS_PER_SM`` and ``WIDE_TILE_MIN_BATCH`` in ``infercore_triton/backend.py`` rest on.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import platform
import sys

import torch
import torch.nn.functional as F
import triton
import triton.testing

from infercore.benchmarks.kernel_timing import graph_median_us
from infercore_triton.backend import choose_decode_config, choose_num_splits
from infercore_triton.decode_attention import DecodeConfig, decode_attention, multiprocessor_count
from infercore_triton.kv_cache_write import write_kv

CEILING_BYTES_PER_S = 4.3e12
#: Where the tensors live (a test runs the ragged path on the host through Triton's interpreter).
DEVICE = "cuda"
#: Per-tensor scales of the fp8 cache: values of N(0, 1) K/V stored at about 1/0.02 of their size.
FP8_K_SCALE, FP8_V_SCALE = 0.02, 0.03


def _make_cache(shape: tuple[int, ...], kv_dtype: str, dev: str,
                layout: str = "slot-major") -> tuple[torch.Tensor, float, float]:
    """A random bf16 cache, or the same values quantized into an fp8 cache (with their k/v scales).

    ``layout="head-major"`` stores each KV head's page contiguously ([2, blocks, kv_heads, page, head]) and
    returns it viewed in the kernels' [2, blocks, page, kv_heads, head] shape, its strides telling the
    difference.
    """
    values = torch.randn(shape, dtype=torch.bfloat16, device=dev)
    scales = (1.0, 1.0)
    if kv_dtype == "fp8":
        cache = torch.empty(shape, dtype=torch.float8_e4m3fn, device=dev)
        slots = torch.arange(shape[1] * shape[2], device=dev)
        # Through the cache-write kernel, as the engine fills it.
        write_kv(values[0].reshape(-1, shape[-2], shape[-1]), values[1].reshape(-1, shape[-2], shape[-1]), cache,
                 slots, FP8_K_SCALE, FP8_V_SCALE)
        values, scales = cache, (FP8_K_SCALE, FP8_V_SCALE)
    if layout == "head-major":
        two, blocks, page, kv_heads, head = shape
        stored = torch.empty((two, blocks, kv_heads, page, head), dtype=values.dtype, device=dev)
        stored.permute(0, 1, 3, 2, 4).copy_(values)
        values = stored.permute(0, 1, 3, 2, 4)
    return values, *scales


def _dequantized(cache: torch.Tensor, k_scale: float, v_scale: float) -> torch.Tensor:
    """The cache as bf16 values (an fp8 cache multiplied back by its scales)."""
    if cache.dtype != torch.float8_e4m3fn:
        return cache
    return torch.stack([cache[0].float() * k_scale, cache[1].float() * v_scale]).to(torch.bfloat16)


def _num_sms() -> int:
    return multiprocessor_count(torch.device(DEVICE))


def engine_splits(num_reqs: int, num_kv_heads: int, width: int, kv_cache_dtype: str) -> int:
    """The split count the engine's Triton backend launches a batch with over a table ``width`` tokens wide."""
    return choose_num_splits(num_reqs, num_kv_heads, width, _num_sms(), kv_cache_dtype == "fp8")


#: Letters of a setting's fourth field: the fp8 choices each turns on.
SETTING_FLAGS = {"k": "fp8_k_words"}


def parse_setting(text: str, base: DecodeConfig | None = None) -> DecodeConfig:
    """``BLOCK_N:WARPS:STAGES`` then optionally letters over ``base``: ``k`` (fp8 K loaded as words); e.g.
    ``128:4:1:k``. Flags not named are off."""
    parts = text.split(":")
    letters = parts[3] if len(parts) > 3 else ""
    unknown = set(letters) - set(SETTING_FLAGS)
    if unknown or len(parts) > 4:
        raise ValueError(f"setting {text!r}: BLOCK_N:WARPS:STAGES[:LETTERS], letters from {''.join(SETTING_FLAGS)}")
    flags = {field: letter in letters for letter, field in SETTING_FLAGS.items()}
    return dataclasses.replace(base or DecodeConfig(), block_n=int(parts[0]), num_warps=int(parts[1]),
                               num_stages=int(parts[2]), **flags)


def setting_name(config: DecodeConfig) -> str:
    """The ``BLOCK_N:WARPS:STAGES[:LETTERS]`` text of ``config`` (the inverse of :func:`parse_setting`)."""
    letters = "".join(letter for letter, field in SETTING_FLAGS.items() if getattr(config, field))
    return f"{config.block_n}:{config.num_warps}:{config.num_stages}" + (f":{letters}" if letters else "")


#: How calls are timed (``--timer``): "graph", the device's time from CUDA-graph replays; or "do_bench", per call
#: as Triton times it, which also counts any time the device waits for the host to launch a short call.
TIMER = "graph"


def _median_us(fn) -> float:  # noqa: ANN001
    if TIMER == "do_bench":
        return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median") * 1e3
    return graph_median_us(fn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-size", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--kv-cache-dtype", choices=["bfloat16", "fp8"], default="bfloat16",
                        help="cache entries: bf16, or e4m3 with per-tensor k/v scales")
    parser.add_argument("--layout", choices=["slot-major", "head-major"], default="slot-major",
                        help="cache page layout: a token's heads adjacent (the engine's), or a head's tokens")
    parser.add_argument("--sweep", action="store_true", help="time several launch configurations first")
    parser.add_argument("--ragged", default=None, metavar="LOW:HIGH:WIDTH",
                        help="instead: uniform random lengths in [LOW, HIGH] with a block table WIDTH tokens "
                             "wide (as in a captured graph); times split strategies, one JSON line each")
    parser.add_argument("--split-sweep", default=None, metavar="B1,B2,...",
                        help="instead: for each batch size, both tile widths at every split count on a ragged batch")
    parser.add_argument("--config", default=None, metavar="BLOCK_N:WARPS:STAGES[:k]",
                        help="time this launch setting instead of the engine's (':k': fp8 K loaded as words)")
    parser.add_argument("--timer", choices=["graph", "do_bench"], default="graph",
                        help="graph: device time from CUDA-graph replays (default); do_bench: per call, launch gaps "
                             "included")
    args = parser.parse_args()
    global TIMER
    TIMER = args.timer
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a GPU that torch can see")

    if args.split_sweep:
        split_sweep(args)
        return
    if args.ragged:
        ragged(args)
        return
    torch.manual_seed(0)
    dtype, dev = torch.bfloat16, DEVICE
    b, ctx, h, kvh, d, bs = args.batch, args.context, args.heads, args.kv_heads, args.head_size, args.block_size
    blocks_per_seq = triton.cdiv(ctx, bs)
    num_blocks = b * blocks_per_seq
    kv_cache, k_scale, v_scale = _make_cache((2, num_blocks, bs, kvh, d), args.kv_cache_dtype, dev, args.layout)
    block_table = torch.randperm(num_blocks, device=dev).view(b, blocks_per_seq).to(torch.int32)
    seq_lens = torch.full((b,), ctx, dtype=torch.int32, device=dev)
    q = torch.randn((b, h, d), dtype=dtype, device=dev)
    out = torch.empty_like(q)
    scale = d**-0.5
    kv_bytes = 2 * b * ctx * kvh * d * kv_cache.element_size()
    splits = engine_splits(b, kvh, blocks_per_seq * bs, args.kv_cache_dtype)

    def run(config: DecodeConfig, num_splits: int = splits) -> float:
        return _median_us(lambda: decode_attention(q, kv_cache, seq_lens, block_table, scale, out,
                                                   num_splits=num_splits, config=config, k_scale=k_scale,
                                                   v_scale=v_scale))

    best = choose_decode_config(b, args.kv_cache_dtype == "fp8")
    if args.config:
        best = parse_setting(args.config, best)
    if args.sweep:
        # Every setting is also timed on a W-GPU-like ragged batch: a setting that wins on equal contexts can
        # lose badly on the engine's batches (one fp8 setting was 6% faster here and 27% slower there).
        ragged_run = _ragged_timer(args, RAGGED_SWEEP_LENGTHS, RAGGED_SWEEP_WIDTH)
        results = []
        if args.kv_cache_dtype == "fp8":  # bigger tiles (half the bytes per token), both conversions, words
            # (inline PTX, K as words)
            conversions = ((False, False), (True, False), (True, True))
            grid = [(bn, w, st, True, *conv) for bn, w, st in itertools.product((64, 128, 256), (4, 8), (1, 2, 3))
                    for conv in conversions]
        else:
            grid = itertools.product((16, 32, 64, 128), (2, 4, 8), (1, 2, 3, 4), (True,), (True,), (False,))
        for block_n, warps, stages, fp16, ptx, k_words in grid:
            config = DecodeConfig(block_n=block_n, num_warps=warps, num_stages=stages, fp8_via_fp16=fp16,
                                  fp8_inline_ptx=ptx, fp8_k_words=k_words)
            try:
                results.append((run(config), ragged_run(config), config))
            except Exception as exc:  # a tile too big for shared memory  # noqa: BLE001
                print(f"{config}: {type(exc).__name__}", flush=True)
                continue
            print(f"block_n={block_n:4d} warps={warps} stages={stages} fp16={fp16} inline_ptx={ptx} "
                  f"k_words={k_words}: "
                  f"{results[-1][0]:8.1f} us {kv_bytes / results[-1][0] / 1e6:6.2f} TB/s, ragged "
                  f"{results[-1][1]:8.1f} us", flush=True)
        best = min(results, key=lambda r: r[0])[2]
        print(f"fastest on the ragged batch: {min(results, key=lambda r: r[1])[2]}", flush=True)
        for extra in (2, 4):
            print(f"best config with {extra} splits: {run(best, extra):8.1f} us", flush=True)
    triton_us = run(best)
    unsplit_us = run(best, 1) if splits > 1 else triton_us

    # Reference: one SDPA over the same K/V made contiguous (the gather is timed apart).
    idx = block_table.long()
    dense_cache = _dequantized(kv_cache, k_scale, v_scale)
    k_dense = dense_cache[0][idx].reshape(b, ctx, kvh, d).transpose(1, 2).contiguous()
    v_dense = dense_cache[1][idx].reshape(b, ctx, kvh, d).transpose(1, 2).contiguous()
    qs = q.unsqueeze(2)
    sdpa_us = _median_us(lambda: F.scaled_dot_product_attention(qs, k_dense, v_dense, scale=scale, enable_gqa=True))
    raw = kv_cache.view(torch.uint8) if kv_cache.element_size() == 1 else kv_cache  # the bytes, whatever dtype
    gather_us = _median_us(lambda: (raw[0][idx], raw[1][idx]))
    ref = F.scaled_dot_product_attention(qs.float(), k_dense.float(), v_dense.float(), scale=scale,
                                         enable_gqa=True).squeeze(2)
    decode_attention(q, kv_cache, seq_lens, block_table, scale, out, num_splits=splits, config=best,
                     k_scale=k_scale, v_scale=v_scale)
    err = ((out.float() - ref).norm() / ref.norm()).item()

    print(json.dumps({
        "benchmark": "decode_attention", "batch": b, "context": ctx, "heads": h, "kv_heads": kvh, "head_size": d,
        "block_size": bs, "dtype": "bfloat16", "kv_cache_dtype": args.kv_cache_dtype, "layout": args.layout, "kv_bytes": kv_bytes, "num_splits": splits,
        "config": {"block_n": best.block_n, "num_warps": best.num_warps, "num_stages": best.num_stages,
                   "fp8_via_fp16": best.fp8_via_fp16, "fp8_inline_ptx": best.fp8_inline_ptx,
                   "fp8_k_words": best.fp8_k_words},
        "timer": TIMER, "triton_us": round(triton_us, 1), "triton_us_one_split": round(unsplit_us, 1), "triton_TBps": round(kv_bytes / triton_us / 1e6, 3),
        "triton_fraction_of_4.3TBps": round(kv_bytes / triton_us / 1e6 / (CEILING_BYTES_PER_S / 1e12), 3),
        # SDPA reads the bf16 (dequantized) values: its bytes are twice the fp8 cache's.
        "sdpa_dense_us": round(sdpa_us, 1), "sdpa_TBps": round(dense_cache.element_size() / kv_cache.element_size()
                                                               * kv_bytes / sdpa_us / 1e6, 3),
        "sdpa_plus_gather_us": round(sdpa_us + gather_us, 1),
        "speedup_vs_sdpa_dense": round(sdpa_us / triton_us, 2),
        "speedup_vs_sdpa_plus_gather": round((sdpa_us + gather_us) / triton_us, 2),
        "rel_err_vs_fp32_sdpa": err, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "triton": triton.__version__, "python": platform.python_version(),
    }))


def _ragged_batch(args: argparse.Namespace, low: int, high: int, width: int,
                  longest_first: bool = False) -> tuple[torch.Tensor, ...]:
    """A ragged batch: query, cache (of ``--kv-cache-dtype``), lengths uniform in [low, high] and a block table
    ``width`` tokens wide whose sequences' blocks are mostly consecutive, as the engine's free queue hands
    them out; with ``longest_first``, its sequences ordered as the engine orders a decode batch."""
    torch.manual_seed(0)
    b, h, kvh, d, bs = args.batch, args.heads, args.kv_heads, args.head_size, args.block_size
    blocks_per_seq = triton.cdiv(width, bs)
    num_blocks = b * blocks_per_seq + 1
    kv_cache, k_scale, v_scale = _make_cache((2, num_blocks, bs, kvh, d), args.kv_cache_dtype, DEVICE)
    block_table = (1 + torch.arange(num_blocks - 1, device=DEVICE)).view(b, blocks_per_seq).to(torch.int32)
    seq_lens = torch.randint(low, high + 1, (b,), dtype=torch.int32, device=DEVICE)
    q = torch.randn((b, h, d), dtype=torch.bfloat16, device=DEVICE)
    if longest_first:
        order = torch.argsort(seq_lens, descending=True)
        q, seq_lens, block_table = q[order].contiguous(), seq_lens[order].contiguous(), block_table[order].contiguous()
    return q, kv_cache, seq_lens, block_table, k_scale, v_scale


#: The launch settings ``--ragged`` tries besides the engine's: tiles, warps and stages.
RAGGED_SETTINGS = ((32, 64, 128), (4, 8), (2, 3, 4))
#: The ragged batch every ``--sweep`` setting is also timed on: W-GPU's contexts in its 4,096-token table.
RAGGED_SWEEP_LENGTHS, RAGGED_SWEEP_WIDTH = (100, 2048), 4096


def _ragged_timer(args: argparse.Namespace, lengths: tuple[int, int], width: int):  # noqa: ANN202
    """A function timing one setting on a ragged batch, longest context first, with the engine's split count."""
    q, kv_cache, seq_lens, block_table, k_scale, v_scale = _ragged_batch(args, *lengths, width, longest_first=True)
    out = torch.empty_like(q)
    splits = engine_splits(args.batch, args.kv_heads, width, args.kv_cache_dtype)
    return lambda config: _median_us(lambda: decode_attention(q, kv_cache, seq_lens, block_table, args.head_size**-0.5,
                                                              out, num_splits=splits, config=config,
                                                              k_scale=k_scale, v_scale=v_scale))


def ragged(args: argparse.Namespace) -> None:
    """A ragged batch: split counts, launch configurations and batch order, one JSON line each."""
    low, high, width = (int(x) for x in args.ragged.split(":"))
    b, kvh, d = args.batch, args.kv_heads, args.head_size
    q, kv_cache, seq_lens, block_table, k_scale, v_scale = _ragged_batch(args, low, high, width)
    out = torch.empty_like(q)
    ref = torch.empty_like(q)
    kv_bytes = 2 * int(seq_lens.sum()) * kvh * d * kv_cache.element_size()
    base = choose_decode_config(b, args.kv_cache_dtype == "fp8")
    decode_attention(q, kv_cache, seq_lens, block_table, d**-0.5, ref, num_splits=1, config=base, k_scale=k_scale,
                     v_scale=v_scale)
    chosen = engine_splits(b, kvh, width, args.kv_cache_dtype)
    orders = {"random": torch.arange(b, device=DEVICE),
              "longest_first": torch.argsort(seq_lens, descending=True)}
    cases = [(s, base) for s in (1, 2, 4)]
    cases += [(1, dataclasses.replace(base, block_n=bn, num_warps=w, num_stages=st))
              for bn, w, st in itertools.product(*RAGGED_SETTINGS)
              if (bn, w, st) != (base.block_n, base.num_warps, base.num_stages)]
    for order_name, order in orders.items():
        qo, lo_, to = q[order].contiguous(), seq_lens[order].contiguous(), block_table[order].contiguous()
        for splits, config in cases:
            if order_name != "random" and splits != 1:
                continue
            us = _median_us(functools.partial(decode_attention, qo, kv_cache, lo_, to, d**-0.5, out,
                                              num_splits=splits, config=config, k_scale=k_scale, v_scale=v_scale))
            err = ((out.float() - ref[order].float()).norm() / ref.float().norm()).item()
            print(json.dumps({"benchmark": "decode_attention_ragged", "batch": b, "lengths": [low, high],
                              "table_width": width, "kv_cache_dtype": args.kv_cache_dtype, "order": order_name, "num_splits": splits,
                              "config": [config.block_n, config.num_warps, config.num_stages], "timer": TIMER,
                              "chosen_today": splits == chosen, "us": round(us, 1),
                              "TBps": round(kv_bytes / us / 1e6, 3), "rel_err_vs_one_split": err}), flush=True)


#: Split counts ``--split-sweep`` tries, and the most programs per multiprocessor it lets a split launch have.
SPLIT_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16)
SPLIT_SWEEP_MAX_PROGRAMS_PER_SM = 24


def split_sweep(args: argparse.Namespace) -> None:
    """For each batch size of ``--split-sweep``: a ragged batch, longest context first, timed with 64- and
    128-token tiles at every split count of :data:`SPLIT_COUNTS`, against the engine's choice."""
    low, high, width = (int(x) for x in args.ragged.split(":")) if args.ragged else (
        *RAGGED_SWEEP_LENGTHS, RAGGED_SWEEP_WIDTH)
    fp8 = args.kv_cache_dtype == "fp8"
    sms, kvh, d = _num_sms(), args.kv_heads, args.head_size
    for b in (int(x) for x in args.split_sweep.split(",")):
        q, kv_cache, seq_lens, block_table, k_scale, v_scale = _ragged_batch(
            argparse.Namespace(**{**vars(args), "batch": b}), low, high, width, longest_first=True)
        out = torch.empty_like(q)
        ref = torch.empty_like(q)
        kv_bytes = 2 * int(seq_lens.sum()) * kvh * d * kv_cache.element_size()
        engine = choose_decode_config(b, fp8)
        splits_today = engine_splits(b, kvh, width, args.kv_cache_dtype)
        decode_attention(q, kv_cache, seq_lens, block_table, d**-0.5, ref, num_splits=1, config=engine,
                         k_scale=k_scale, v_scale=v_scale)
        cases = {(block_n, splits) for block_n in (64, 128) for splits in SPLIT_COUNTS
                 if splits == 1 or b * kvh * splits <= SPLIT_SWEEP_MAX_PROGRAMS_PER_SM * sms}
        cases.add((engine.block_n, splits_today))
        times, worst_err = {}, 0.0
        for block_n, splits in sorted(cases):
            config = dataclasses.replace(engine, block_n=block_n)
            times[(block_n, splits)] = _median_us(functools.partial(
                decode_attention, q, kv_cache, seq_lens, block_table, d**-0.5, out, num_splits=splits, config=config,
                k_scale=k_scale, v_scale=v_scale))
            worst_err = max(worst_err, ((out.float() - ref.float()).norm() / ref.float().norm()).item())
        best = min(times, key=times.__getitem__)
        engine_us = times[(engine.block_n, splits_today)]
        print(json.dumps({"benchmark": "decode_attention_split_sweep", "batch": b, "lengths": [low, high],
                          "table_width": width, "kv_cache_dtype": args.kv_cache_dtype, "timer": TIMER,
                          "engine": {"block_n": engine.block_n, "splits": splits_today, "us": round(engine_us, 1),
                                     "TBps": round(kv_bytes / engine_us / 1e6, 3)},
                          "best": {"block_n": best[0], "splits": best[1], "us": round(times[best], 1),
                                   "TBps": round(kv_bytes / times[best] / 1e6, 3)},
                          "engine_over_best": round(engine_us / times[best], 3),
                          "us": {f"{bn}x{s}": round(t, 1) for (bn, s), t in sorted(times.items())},
                          "max_rel_err_vs_one_split": worst_err}), flush=True)


if __name__ == "__main__":
    main()
