"""The CPU platform sizes torch's threads for a shared machine: the affinity mask and a cgroup quota
bound them, and a neighbour that keeps a core busy takes one thread away until it stops."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from infercore import cpus
from infercore.cpus import available_cpus, cgroup_cpu_quota
from infercore_cpu import thread_budget
from infercore_cpu.thread_budget import ThreadBudget, busy_seconds


def test_cgroup_quota_v2_and_v1(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert cgroup_cpu_quota(tmp_path) == 1.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    assert cgroup_cpu_quota(tmp_path) is None


def test_available_cpus_respects_a_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpus, "cgroup_cpu_quota", lambda: 1.5)
    assert available_cpus() == 1
    monkeypatch.setattr(cpus, "cgroup_cpu_quota", lambda: None)
    assert available_cpus() == len(os.sched_getaffinity(0))


def test_busy_seconds_counts_only_our_cpus(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  300 0 100 900 5 0 0 0 0 0\ncpu0 100 0 0 400 5 0 0 0 0 0\ncpu1 200 0 100 500 0 0 0 0 0 0\n")
    assert busy_seconds({1}, stat) == pytest.approx(300 / thread_budget._CLK_TCK)
    assert busy_seconds({0, 1}, stat) == pytest.approx(400 / thread_budget._CLK_TCK)


class _Machine:
    """A fake clock and CPU-time counters: ``run(seconds, ours, others)`` advances them."""

    def __init__(self) -> None:
        self.now = self.busy = self.own = 0.0

    def run(self, seconds: float, ours: float, others: float) -> None:
        self.now += seconds
        self.own += ours * seconds
        self.busy += (ours + others) * seconds


def test_a_busy_neighbour_takes_a_thread_until_it_stops() -> None:
    machine = _Machine()
    budget = ThreadBudget(2, {0, 1}, busy=lambda: machine.busy, own=lambda: machine.own, clock=lambda: machine.now)
    machine.run(1.0, ours=2.0, others=0.05)
    assert budget.wanted() == 2
    machine.run(1.0, ours=1.33, others=0.67)  # a neighbour on one core while we ran two threads
    assert budget.wanted() == 1
    machine.run(1.0, ours=1.0, others=1.0)  # with one thread each has a core
    assert budget.wanted() == 1
    machine.run(1.0, ours=1.0, others=0.1)  # the neighbour stopped
    assert budget.wanted() == 2


def test_on_step_sets_torch_threads_on_the_calling_thread() -> None:
    before = torch.get_num_threads()
    machine = _Machine()
    budget = ThreadBudget(2, {0, 1}, busy=lambda: machine.busy, own=lambda: machine.own, clock=lambda: machine.now)
    try:
        machine.run(0.1, ours=1.0, others=1.0)
        budget.on_step()  # within the interval: nothing measured yet
        assert budget.threads == 2
        machine.run(1.0, ours=1.0, others=1.0)
        budget.on_step()
        assert budget.threads == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
