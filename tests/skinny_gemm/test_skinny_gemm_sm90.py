"""The skinny GEMM compiles for sm_90 (an H100/H200) without a GPU: vectorised 16-byte weight loads; as a
programmatic dependent, it waits for the kernel in front only after issuing its first weight loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CODE = r'''
import triton
from triton.backends.compiler import GPUTarget
from infercore_triton.skinny_gemm import _skinny_gemm_kernel as kernel
pointers = {"part_ptr": "*fp32"}
for pdl in (False, True):
    consts = {"M_PAD": 1, "BLOCK_N": 8, "BLOCK_K": 1024, "SPLIT": False, "USE_DOT": False, "PREFETCH": True,
              "HAS_BIAS": False, "DOT_PRECISION": "tf32", "USE_PDL": pdl}
    signature = {n: "constexpr" if n in consts else pointers.get(n, "*bf16") if n.endswith("_ptr")
                 else "i32" for n in kernel.arg_names}
    aligned = [i for i, n in enumerate(kernel.arg_names)
               if n.endswith("_ptr") or n in ("N", "K", "stride_xm", "stride_om", "k_per_split")]
    source = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=consts,
                                       attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 3}).asm["ptx"]
    wait = ptx.find("griddepcontrol.wait")
    # With PDL, the first weight chunk's loads are issued before the wait for the kernel in front.
    print(pdl, ptx.count("ld.global.v4") > 0, wait > ptx.find("ld.global.v4") if pdl else wait == -1)
'''


def test_plain_and_dependent_variants_compile_for_sm90(tmp_path: Path) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path), "TRITON_DEFAULT_FP_FUSION": "1"}
    done = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "True", "True", "True", "True", "True"]
