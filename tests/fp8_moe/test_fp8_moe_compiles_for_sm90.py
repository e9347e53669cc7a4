"""The FP8 fused-MoE grouped GEMM compiles for sm_90 in its default and largest settings, its loads
pipelined, within its shared memory."""

from __future__ import annotations

from pathlib import Path

from sm90_compile import SM90_SHARED_BYTES, run_compile_script


def test_fp8_moe_gemm_compiles_for_sm90(tmp_path: Path) -> None:
    lines = run_compile_script(Path(__file__).with_name("compile_fp8_moe_sm90.py"), tmp_path)
    assert len(lines) == 6, lines
    shared = [int(line.split(": ")[1].split()[0]) for line in lines]
    assert all(size <= SM90_SHARED_BYTES for size in shared), lines
