"""The kit says in a sentence why it skips a case."""

from __future__ import annotations

from test_kit import _summary, run_kit


def test_a_platform_without_custom_ops_is_told_so_in_a_sentence() -> None:
    proc = run_kit("--infercore-platform", "testdev", "-k", "custom_op_matches", "-rs")
    assert proc.returncode == 0, _summary(proc)
    assert "platform 'testdev' registers no custom ops, so every op runs core's torch reference" in proc.stdout, \
        _summary(proc)
