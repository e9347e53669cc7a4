"""The conformance kit passes the real cpu platform and the example out-of-tree acme platform (with its
GPT-2 model), and fails deliberately broken backends and kernels, naming the case."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BROKEN_PLUGIN = Path(__file__).with_name("broken_plugin.py")


def run_kit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``pytest -p infercore.testing ARGS`` in a fresh process (the kit changes process-wide state)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "infercore.testing", "-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=600,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def _summary(proc) -> str:
    return proc.stdout[-4000:] + proc.stderr[-2000:]


def test_kit_passes_cpu(qwen3_folder: Path) -> None:
    proc = run_kit("--infercore-platform", "cpu", "--infercore-model", str(qwen3_folder))
    assert proc.returncode == 0, _summary(proc)
    assert re.search(r"\d+ passed", proc.stdout) and "skipped" not in proc.stdout, _summary(proc)


def test_kit_passes_the_example_platform_and_model(gpt2_folder: Path) -> None:
    proc = run_kit("--infercore-platform", "acme", "--infercore-model", str(gpt2_folder), "-rs")
    assert proc.returncode == 0, _summary(proc)
    assert re.search(r"\d+ passed", proc.stdout), _summary(proc)
    # The only cases left out are those the example backend declines in validate (an fp8 cache), and the
    # write_kv check, which it does not claim.
    skips = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert all("backend 'acme_attention' declines case 'fp8 cache" in line
               or "backend 'acme_attention' does not set writes_kv_alone" in line for line in skips), skips
    assert any("does not set writes_kv_alone" in line for line in skips), skips


def test_kit_runs_the_whole_graph_case_for_backends_that_declare_it() -> None:
    """The Triton backend (through the interpreter) sets captures_mixed_steps: the kit pads a mixed step as
    its whole-step graph would and checks its output and cache, and its write_kv's cache. (The cpu and acme
    backends do not, and their runs above pass without it.)"""
    proc = run_kit("--infercore-platform", "cpu", "--infercore-attention-backend", "triton", "-k", "whole-step")
    assert proc.returncode == 0 and "2 passed" in proc.stdout, _summary(proc)


def test_kit_runs_the_visible_bounds_cases_for_backends_that_declare_them() -> None:
    """Backends that set supports_visible_bounds (Gemma 3's image spans) are checked against the reference:
    the cpu one on its two cases, Triton (which also captures mixed steps whole) on the whole-graph one too;
    both set writes_kv_alone, so each case also checks the cache write_kv leaves."""
    proc = run_kit("--infercore-platform", "cpu", "--infercore-attention-backend", "triton", "-k", "visible")
    assert proc.returncode == 0 and "6 passed" in proc.stdout, _summary(proc)
    proc = run_kit("--infercore-platform", "cpu", "-k", "visible")
    assert proc.returncode == 0 and "4 passed" in proc.stdout, _summary(proc)


@pytest.fixture
def broken_dir(tmp_path: Path) -> Path:
    shutil.copy(BROKEN_PLUGIN, tmp_path / "conftest.py")
    return tmp_path


#: Each broken backend, the cases it must fail and cases it must still pass.
BROKEN_BACKENDS = {
    "broken_scale": (["fresh prefills", "pure decode", "sliding window"], []),
    "broken_prefix": (["prefix blocks", "pure decode", "chunked prompt", "same-step prefix sharing"],
                      ["fresh prefills"]),
    "broken_window": (["sliding window"], ["fresh prefills", "prefix blocks", "alibi"]),
}


def test_kit_fails_broken_backends_and_ops_naming_the_case(broken_dir: Path) -> None:
    backends = [arg for name in BROKEN_BACKENDS for arg in ("--infercore-attention-backend", name)]
    proc = run_kit("--infercore-platform", "cpu", *backends, "-k", "attention or custom_op", cwd=broken_dir)
    assert proc.returncode == 1, _summary(proc)
    for backend, (failing, passing) in BROKEN_BACKENDS.items():
        for case in failing:
            assert f"attention case {case!r}, backend {backend!r}" in proc.stdout, (case, _summary(proc))
        for case in passing:
            assert f"attention case {case!r}, backend {backend!r}" not in proc.stdout, (case, _summary(proc))
    assert "custom op 'gelu' (default) of plugin 'broken' differs from its reference" in proc.stdout, _summary(proc)
    assert "custom op 'gelu' (tanh)" not in proc.stdout, "the tanh variant is right and must pass"
    assert "custom op 'linear'" not in proc.stdout, "cpu's real linear kernel must pass"


def test_kit_checks_write_kv_where_a_backend_claims_it(broken_dir: Path) -> None:
    """A backend that sets writes_kv_alone is held to it: one whose write_kv swaps K and V fails every case
    (its forward is right); the reference and cpu (torch_paged) backends pass them all."""
    proc = run_kit("--infercore-platform", "cpu", "--infercore-attention-backend", "broken_write",
                   "--infercore-attention-backend", "reference", "--infercore-attention-backend", "torch_paged",
                   "-k", "write_kv or attention_matches", cwd=broken_dir)
    assert proc.returncode == 1, _summary(proc)
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    assert failed and all("test_write_kv_alone_matches_reference[broken_write-" in line for line in failed), failed
    for case in ("fresh prefills", "pure decode", "prefix blocks", "sliding window"):
        assert f"write_kv case {case!r}, backend 'broken_write'" in proc.stdout, (case, _summary(proc))
    assert re.search(r"\d+ passed", proc.stdout) and "skipped" not in proc.stdout, _summary(proc)
