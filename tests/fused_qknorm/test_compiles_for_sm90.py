"""The fused kernel and the unfused one it shares a helper with compile for sm_90 on a machine without a GPU (the interpreter checks far less)."""

from __future__ import annotations

from pathlib import Path

from sm90_compile import run_compile_script


def test_qk_norm_rotary_kernels_compile_for_sm90(tmp_path: Path) -> None:
    lines = run_compile_script(Path(__file__).with_name("compile_sm90.py"), tmp_path)
    assert len(lines) == 3 and all(line.startswith("sm_90") and "bytes of cubin" in line for line in lines), lines
    assert all(int(line.split(": ")[1].split()[0]) > 0 for line in lines)
