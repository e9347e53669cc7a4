"""Decode attention over an fp8 KV cache: launch settings timed on batch 256 x context 1,024 and on a W-GPU-like
ragged batch, the fastest written as the launch table the engine reads through ``INFERCORE_DECODE_FP8_TABLE``.

    python benchmarks/decode_fp8_sweep.py --settings 64:4:3 128:4:2 256:4:3 128:4:1:k --write-table table.json

Settings are ``benchmarks/decode_attention.py``'s (``BLOCK_N:WARPS:STAGES[:LETTERS]``; ``k``: K loaded as
words). The engine's built-in fp8 setting is always timed first, as the baseline. Each setting gets one JSON
line: µs, TB/s and the fraction of 4.3 TB/s on both batches (the bytes of the fp8 cache each reads), and its
output's norm-relative difference from the baseline's. A setting whose difference passes
:data:`MAX_REL_DIFF` or that fails to build is never chosen. The fastest setting (by the geometric mean of
its two bandwidths) then has the programs per multiprocessor that split counts aim for timed on ragged
batches of 32 and 256 sequences (the fewest in total wins; with none timed, the default 2 stays). Past
``--budget-s`` the settings and counts not reached are skipped. A last line gives the choice against the baseline; ``--write-table`` writes
it. Workload shapes as in ``decode_attention.py`` (16 query / 8 KV heads of 128, pages of 16).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import decode_attention as bench  # the sibling benchmark (this folder is on sys.path as a script)
import torch
import triton
from decode_attention import parse_setting, setting_name

from infercore_triton.backend import _FP8_TILE, FP8_PROGRAMS_PER_SM, choose_num_splits
from infercore_triton.decode_attention import DecodeConfig, decode_attention, multiprocessor_count
from infercore_triton.decode_fp8_table import Fp8DecodeTable

#: Largest norm-relative difference from the baseline's output a setting may show and still be chosen: every
#: setting computes the same attention (only the order of its sums and its output's rounding differ), so a
#: setting past this is broken.
MAX_REL_DIFF = 0.06
#: Ragged batch sizes the programs-per-multiprocessor choice is timed on (W-GPU's contexts and table width).
PER_SM_BATCHES = (32, 256)
#: The ragged batches' contexts and block table width: W-GPU's, as the decode benchmark's sweep times.
RAGGED_LENGTHS, RAGGED_WIDTH = bench.RAGGED_SWEEP_LENGTHS, bench.RAGGED_SWEEP_WIDTH


class _Batch:
    """One timed batch: query, fp8 cache, lengths, table, split count and the fp8 bytes one call reads."""

    def __init__(self, q: torch.Tensor, kv_cache: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor,
                 k_scale: float, v_scale: float, width: int) -> None:
        self.q, self.kv_cache, self.seq_lens, self.block_table = q, kv_cache, seq_lens, block_table
        self.k_scale, self.v_scale, self.width = k_scale, v_scale, width
        self.out = torch.empty_like(q)
        self.kv_bytes = 2 * int(seq_lens.sum()) * kv_cache.shape[3] * kv_cache.shape[4] * kv_cache.element_size()

    def splits(self, programs_per_sm: int) -> int:
        return choose_num_splits(self.q.shape[0], self.kv_cache.shape[3], self.width,
                                 multiprocessor_count(self.q.device), True, programs_per_sm=programs_per_sm)

    def call(self, config: DecodeConfig, programs_per_sm: int) -> torch.Tensor:
        splits = self.splits(programs_per_sm)
        return decode_attention(self.q, self.kv_cache, self.seq_lens, self.block_table, self.q.shape[-1] ** -0.5,
                                self.out, num_splits=splits, config=config, k_scale=self.k_scale,
                                v_scale=self.v_scale)

    def time(self, config: DecodeConfig, programs_per_sm: int) -> dict[str, float]:
        us = bench._median_us(lambda: self.call(config, programs_per_sm))
        tbps = self.kv_bytes / us / 1e6
        return {"us": round(us, 1), "TBps": round(tbps, 3),
                "fraction_of_4.3TBps": round(tbps / (bench.CEILING_BYTES_PER_S / 1e12), 3),
                "splits": self.splits(programs_per_sm)}


def _uniform(args: argparse.Namespace) -> _Batch:
    torch.manual_seed(0)
    b, ctx, kvh, d, bs = args.batch, args.context, args.kv_heads, args.head_size, args.block_size
    blocks_per_seq = triton.cdiv(ctx, bs)
    dev = bench.DEVICE
    kv_cache, k_scale, v_scale = bench._make_cache((2, b * blocks_per_seq, bs, kvh, d), "fp8", dev)
    block_table = torch.randperm(b * blocks_per_seq, device=dev).view(b, blocks_per_seq).to(torch.int32)
    seq_lens = torch.full((b,), ctx, dtype=torch.int32, device=dev)
    q = torch.randn((b, args.heads, d), dtype=torch.bfloat16, device=dev)
    return _Batch(q, kv_cache, seq_lens, block_table, k_scale, v_scale, blocks_per_seq * bs)


def _ragged(args: argparse.Namespace, batch: int) -> _Batch:
    ns = argparse.Namespace(**{**vars(args), "batch": batch, "kv_cache_dtype": "fp8"})
    q, kv_cache, seq_lens, block_table, k_scale, v_scale = bench._ragged_batch(ns, *RAGGED_LENGTHS, RAGGED_WIDTH,
                                                                               longest_first=True)
    return _Batch(q, kv_cache, seq_lens, block_table, k_scale, v_scale, RAGGED_WIDTH)


def _rel_diff(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


def _score(record: dict) -> float:
    """The geometric mean of a setting's bandwidths on the two batches."""
    return math.sqrt(record["uniform"]["TBps"] * record["ragged"]["TBps"])


def sweep(args: argparse.Namespace) -> dict:
    """Times the baseline and each setting, then programs per multiprocessor for the fastest; prints JSON lines
    and returns the choice's record."""
    deadline = time.monotonic() + args.budget_s if args.budget_s else math.inf
    uniform, ragged = _uniform(args), _ragged(args, args.batch)
    baseline = setting_name(_FP8_TILE)
    refs = {name: batch.call(_FP8_TILE, FP8_PROGRAMS_PER_SM).clone() for name, batch in
            (("uniform", uniform), ("ragged", ragged))}
    records = []
    for setting in dict.fromkeys([baseline, *args.settings]):
        record: dict = {"benchmark": "decode_attention_fp8_sweep", "setting": setting, "baseline": setting == baseline,
                        "programs_per_sm": FP8_PROGRAMS_PER_SM}
        if records and time.monotonic() > deadline:
            print(json.dumps({**record, "skipped": f"--budget-s {args.budget_s} spent"}), flush=True)
            continue
        try:
            config = parse_setting(setting, _FP8_TILE)
            for name, batch in (("uniform", uniform), ("ragged", ragged)):
                record[name] = batch.time(config, FP8_PROGRAMS_PER_SM)
                record[f"rel_diff_{name}"] = round(_rel_diff(batch.call(config, FP8_PROGRAMS_PER_SM), refs[name]), 5)
        except Exception as exc:  # a tile too big for shared memory, a build the compiler refuses  # noqa: BLE001
            record["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            print(json.dumps(record), flush=True)
            continue
        record["ok"] = max(record["rel_diff_uniform"], record["rel_diff_ragged"]) <= MAX_REL_DIFF
        record["score_TBps"] = round(_score(record), 3)
        print(json.dumps(record), flush=True)
        records.append(record)
    base = next(r for r in records if r["baseline"])
    best = max((r for r in records if r["ok"]), key=_score)
    config = parse_setting(best["setting"], _FP8_TILE)
    per_sm_times = {}
    batches = [_ragged(args, b) for b in PER_SM_BATCHES]
    for per_sm in args.programs_per_sm:
        if time.monotonic() > deadline:
            break
        times = [batch.time(config, per_sm) for batch in batches]
        per_sm_times[per_sm] = sum(t["us"] for t in times)
        print(json.dumps({"benchmark": "decode_attention_fp8_programs_per_sm", "setting": best["setting"],
                          "programs_per_sm": per_sm, **{f"ragged_{b}": t for b, t in zip(PER_SM_BATCHES, times)}}),
              flush=True)
    per_sm = min(per_sm_times, key=per_sm_times.__getitem__) if per_sm_times else FP8_PROGRAMS_PER_SM
    choice = {"benchmark": "decode_attention_fp8_choice", "setting": best["setting"], "programs_per_sm": per_sm,
              "uniform": best["uniform"], "ragged": best["ragged"], "rel_diff_uniform": best["rel_diff_uniform"],
              "rel_diff_ragged": best["rel_diff_ragged"],
              "baseline": {"setting": base["setting"], "programs_per_sm": FP8_PROGRAMS_PER_SM,
                           "uniform": base["uniform"], "ragged": base["ragged"]},
              "speedup_uniform": round(base["uniform"]["us"] / best["uniform"]["us"], 3),
              "speedup_ragged": round(base["ragged"]["us"] / best["ragged"]["us"], 3),
              "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "host",
              "triton": triton.__version__}
    if per_sm_times:
        choice["ragged_small_and_full_us_at_programs_per_sm"] = {str(k): round(v, 1) for k, v in per_sm_times.items()}
    if args.write_table:
        table = Fp8DecodeTable(config, per_sm)
        Path(args.write_table).write_text(json.dumps(table.to_json(measured=choice), indent=1))
        choice["table"] = args.write_table
    print(json.dumps(choice), flush=True)
    return choice


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="+", default=["64:4:3", "128:4:2", "128:8:3", "256:4:3", "128:4:1:k"],
                        metavar="BLOCK_N:WARPS:STAGES[:LETTERS]")
    parser.add_argument("--programs-per-sm", type=lambda s: [int(x) for x in s.split(",") if x], default=[2, 4, 8],
                        metavar="N,N,...", help="split targets tried with the fastest setting (empty: keep 2)")
    parser.add_argument("--write-table", default=None, metavar="PATH", help="write the choice as a launch table")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="seconds of timing after which settings and split targets not reached are skipped")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-size", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=16)
    args = parser.parse_args()
    if bench.DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit("this benchmark needs a GPU that torch can see")
    sweep(args)


if __name__ == "__main__":
    main()
