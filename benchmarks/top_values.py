"""The top values of a batch of logits (the top-k/top-p threshold's search): ``torch.topk`` against
``infercore.sample.truncation.top_values`` and its block search at each block length, at W-GPU's decode shape.

Prints one JSON line per (method, width): median microseconds from ``triton.testing.do_bench``.

    python benchmarks/top_values.py                 # 256 x 151936 float32 on the GPU
"""

from __future__ import annotations

import argparse
import json

import torch
import triton.testing

from infercore.sample import truncation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=151936)
    args = parser.parse_args()
    logits = torch.randn((args.batch, args.vocab), device="cuda") * 2
    methods = {"torch.topk": lambda x, w: x.topk(w, dim=-1).values, "top_values": truncation.top_values}
    for block in (32, 64, 128, 256):
        methods[f"blocks_{block}"] = lambda x, w, block=block: truncation._top_blocks(x, w, block)
    for width in (50, 1024):
        want = logits.topk(width, dim=-1).values
        for name, fn in methods.items():
            if name.startswith("blocks") and args.vocab // int(name.split("_")[1]) < width:
                continue
            exact = torch.equal(fn(logits, width), want)
            us = triton.testing.do_bench(lambda fn=fn, width=width: fn(logits, width), warmup=25, rep=200,
                                         return_mode="median") * 1e3
            print(json.dumps({"benchmark": "top_values", "batch": args.batch, "vocab": args.vocab, "width": width,
                              "method": name, "us": round(us, 1), "exact": exact}), flush=True)


if __name__ == "__main__":
    main()
