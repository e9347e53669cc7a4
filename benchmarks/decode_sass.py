"""The decode kernel's machine code for sm_90 (an H100/H200), compiled on any machine, no GPU needed.

For each launch setting: the instructions of the context loop (one trip is one tile of ``block_n`` tokens,
per warp) by kind, their count per 128 tokens summed over the program's warps, registers, spills and
shared memory. A memory-bound kernel that issues too many instructions per byte shows here before any GPU
time is spent: over an fp8 cache, the default setting's loop gathers V byte by byte from shared memory
(``LDS.U8`` and ``PRMT``) and reloads the query's operand in pieces (``LDS.64`` and ``IMAD.MOV``).

    TRITON_INTERPRET=0 python benchmarks/decode_sass.py --kv-cache-dtype fp8 --settings 128:4:3 128:4:1:k

Settings are ``BLOCK_N:WARPS:STAGES``, then ``k`` to load K as words (``fp8_k_words``). The shape is W-GPU's
(groups of 2 query heads, heads of 128, pages of 16). Prints one JSON line per setting.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import triton
from decode_attention import parse_setting  # the sibling benchmark (this folder is on sys.path as a script)
from triton.backends.compiler import GPUTarget

from infercore_triton.decode_attention import _decode_split_kernel

#: Per-step arguments (the kernel is not specialised on them); everything else arrives 16-byte aligned.
STEP_VARYING = ("block_table_ptr", "seq_lens_ptr", "query_start_loc_ptr", "stride_bt", "num_seqs")
INT_POINTERS = ("block_table_ptr", "seq_lens_ptr", "query_start_loc_ptr")
#: Instruction kinds always reported (zero when absent), besides the ten most frequent.
WATCHED = ("LDS.U8", "PRMT", "IMAD.MOV.U32", "LDS.64", "LDS.128", "LDSM.16.M88.4", "LDSM.16.MT88.4", "STS.128",
           "STS.U8", "F2FP.F16.E4M3.UNPACK_B", "HMMA.16816.F32", "LDGSTS.E.BYPASS.128")
#: Opcode prefixes of sm_90's warpgroup MMAs (HGMMA: 16-bit operands, QGMMA: fp8), counted in the loop as "gmma".
GMMA_PREFIXES = ("HGMMA", "QGMMA")


def compile_sm90(fp8: bool, block_n: int, warps: int, stages: int, k_words: bool = False,
                 group: int = 2, head: int = 128, page: int = 16, short: int = 0, splits: int = 1,
                 last_reduces: bool = False, query_starts: bool = False,
                 runtime_splits: bool = False, launch_dependents: bool = False) -> triton.compiler.CompiledKernel:
    """The decode kernel over an fp8 (as bytes, converted in PTX) or bf16 cache, in ``splits`` splits, for sm_90;
    over fp8, ``k_words`` loads K as 32-bit words; ``short`` > 0: one program row per query token of queries up
    to ``short`` tokens (speculative verification); ``last_reduces``: the split that finishes last merges the
    partials (arrival counters); ``query_starts``: the decodes are found among a padded batch's requests (a
    whole mixed graph's walk); ``runtime_splits``: the split count is an argument; ``launch_dependents``: it
    lets the next kernel start early (a programmatic dependent launch)."""
    constants = {"GROUP": group, "GROUP_PAD": max(16, triton.next_power_of_2(group)), "HEAD": head,
                 "HEAD_PAD": triton.next_power_of_2(head), "PAGE": page, "BLOCK_N": block_n, "NUM_SPLITS": 0 if runtime_splits else splits,
                 "DOT_PRECISION": "ieee", "FP16_MATH": fp8, "FP8_PTX": fp8, "FP8_K_WORDS": fp8 and k_words,
                 "QUERY_STARTS": short > 0 or query_starts, "SHORT": short,
                 "LAST_REDUCES": last_reduces and splits > 1,
                 "SPLITS_PAD": max(32, triton.next_power_of_2(splits)), "LAUNCH_DEPENDENTS": launch_dependents}
    signature = {}
    for name in _decode_split_kernel.arg_names:
        if name in constants:
            signature[name] = "constexpr"
        elif name in ("k_cache_ptr", "v_cache_ptr"):
            signature[name] = "*u8" if fp8 else "*bf16"
        elif name in INT_POINTERS or name == "counter_ptr":
            signature[name] = "*i32"
        elif name.startswith("part_"):
            signature[name] = "*fp32"
        elif name.endswith("_ptr"):
            signature[name] = "*bf16"
        else:
            signature[name] = "fp32" if name in ("scale", "v_scale") else "i32"
    aligned = [i for i, name in enumerate(_decode_split_kernel.arg_names)
               if (name.endswith("_ptr") or name.startswith("stride_")) and name not in STEP_VARYING]
    source = triton.compiler.ASTSource(fn=_decode_split_kernel, signature=signature, constexprs=constants,
                                       attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})


def loop_instructions(sass: str) -> list[str]:
    """The opcodes (with modifiers, without predicates) of the longest loop: from a label to the branch back."""
    lines = sass.splitlines()
    labels = {line[:-1]: i for i, line in enumerate(lines) if re.fullmatch(r"\w+:", line)}
    best: tuple[int, int] | None = None
    for i, line in enumerate(lines):
        branch = re.search(r"\bBRA\s+(\w+)", line)
        if branch and labels.get(branch.group(1), i) < i:
            start = labels[branch.group(1)]
            if best is None or i - start > best[1] - best[0]:
                best = (start, i)
    if best is None:
        return []
    ops = []
    for line in lines[best[0] + 1: best[1] + 1]:
        fields = line.split("\t", 1)[-1].split()
        fields = [f for f in fields if not f.startswith("@")]
        if fields:
            ops.append(fields[0].rstrip(";"))
    return ops


def resource_usage(compiled: triton.compiler.CompiledKernel) -> dict[str, int]:
    """Registers and stack (spill) bytes per thread, from ``cuobjdump`` over the cubin."""
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as folder:
        cubin = Path(folder) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        out = subprocess.run([str(tool), "-res-usage", str(cubin)], capture_output=True, text=True, check=True).stdout
    usage = {key.lower(): int(value) for key, value in re.findall(r"(REG|STACK):(\d+)", out)}
    return {"registers": usage.get("reg", 0), "stack_bytes": usage.get("stack", 0)}


def report(fp8: bool, setting: str) -> dict:
    """One JSON record for ``BLOCK_N:WARPS:STAGES[:k]``."""
    config = parse_setting(setting)
    block_n, warps, stages = config.block_n, config.num_warps, config.num_stages
    k_words = config.fp8_k_words
    compiled = compile_sm90(fp8, block_n, warps, stages, k_words)
    ops = loop_instructions(compiled.asm["sass"])
    kinds = Counter(ops)
    return {"benchmark": "decode_sass", "target": "sm_90", "kv_cache_dtype": "fp8" if fp8 else "bfloat16",
            "block_n": block_n, "num_warps": warps, "num_stages": stages,
            "fp8_k_words": k_words and fp8,
            "loop_instructions_per_warp": len(ops),
            "instructions_per_128_tokens": round(len(ops) * warps * 128 / block_n),
            **resource_usage(compiled), "shared_bytes": compiled.metadata.shared,
            "watched": {k: kinds.get(k, 0) for k in WATCHED}, "most_frequent": dict(kinds.most_common(10)),
            "gmma": {k: v for k, v in sorted(kinds.items()) if k.startswith(GMMA_PREFIXES)},
            "triton": triton.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kv-cache-dtype", choices=["bfloat16", "fp8"], default="fp8")
    parser.add_argument("--settings", nargs="+", default=["128:4:3", "128:4:1:k"])
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        raise SystemExit("compiling for sm_90 needs TRITON_INTERPRET=0")
    for setting in args.settings:
        print(json.dumps(report(args.kv_cache_dtype == "fp8", setting)), flush=True)


if __name__ == "__main__":
    main()
