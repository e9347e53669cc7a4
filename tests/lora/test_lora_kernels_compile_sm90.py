"""The ``lora_apply`` kernels compile for sm_90 (H100/H200) without a GPU, within its shared memory: the
interpreter the other kernel tests run accepts code the compiler refuses. ``compile_lora_sm90.py``
without ``--one-each`` builds every variant the W-GPU and 8B shapes launch."""

from __future__ import annotations

from pathlib import Path

from sm90_compile import SM90_SHARED_BYTES, run_compile_script


def test_lora_kernels_compile_for_sm90(tmp_path: Path) -> None:
    lines = run_compile_script(Path(__file__).with_name("compile_lora_sm90.py"), tmp_path, "--one-each")
    assert len(lines) == 5, lines
    assert all(0 <= int(line.rsplit(": ", 1)[1].split()[0]) <= SM90_SHARED_BYTES for line in lines), lines
