"""Two Ray "nodes" on this machine, started as a user starts a cluster (``ray start --head`` and
``ray start --address``, each with one CPU and a custom resource of its own): with
``pipeline_stage_placement="spread"`` the two stages land on different nodes and give the tokens of
one stage."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from pp_cases import greedy_tokens

import infercore


def _ray_cli() -> str:
    return str(Path(sys.executable).with_name("ray")) if Path(sys.executable).with_name("ray").exists() else "ray"


def _processes_under(folder: str) -> list[int]:
    """Pids of the processes whose command line names ``folder`` (the cluster's own session folder)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if folder in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.fixture
def two_node_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A head node and a second node started with ``ray start``; yields the head's address. Only this
    cluster's processes are stopped afterwards (found by its own temp folder), never others' Ray."""
    folder = tempfile.mkdtemp(prefix="ippr", dir="/tmp")  # short: Ray's socket paths must stay short
    port = 20000 + os.getpid() % 20000
    # Ray 2.60's `ray start --head` turns token authentication on, and a node joining with `ray start
    # --address` then fails without the token: this local cluster opts out, its driver (this process) too.
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    env = dict(os.environ)
    # The raylets' workers import infercore from where this test does.
    source = str(Path(infercore.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([source, env.get("PYTHONPATH", "")])
    address = f"127.0.0.1:{port}"
    try:
        subprocess.run([_ray_cli(), "start", "--head", f"--port={port}", "--num-cpus=1", "--num-gpus=0",
                        '--resources={"pp_node_a": 1}', "--include-dashboard=false", f"--temp-dir={folder}"],
                       env=env, check=True, capture_output=True, timeout=120)
        subprocess.run([_ray_cli(), "start", f"--address={address}", "--num-cpus=1", "--num-gpus=0",
                        '--resources={"pp_node_b": 1}'], env=env, check=True, capture_output=True, timeout=120)
        yield address
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in _processes_under(folder):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            time.sleep(1.0)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.heavy
@pytest.mark.serial  # two Ray nodes of one machine: an actor died under a second test process's load
def test_stages_on_two_nodes_match_one_stage(two_node_cluster: str, tiny_model_factory,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model_factory("LlamaForCausalLM")
    expected = greedy_tokens(model)
    ray.init(address=two_node_cluster, log_to_driver=False)
    try:
        nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
        assert len(nodes) == 2
        seen: list[str] = []
        from infercore.executor import ray_executor

        start = ray_executor.RayExecutor._start

        def record(self, *args):  # the node of each worker, in rank order
            start(self, *args)
            seen.extend(ray.get([actor.node_id.remote() for actor in self.actors]))

        monkeypatch.setattr(ray_executor.RayExecutor, "_start", record)
        got = greedy_tokens(model, pipeline_parallel_size=2, distributed_executor_backend="ray",
                            pipeline_stage_placement="spread")
    finally:
        ray.shutdown()
    assert got == expected
    assert len(seen) == 2 and seen[0] != seen[1]
    assert {name for node in seen for name in nodes[node] if name.startswith("pp_node_")} == {"pp_node_a", "pp_node_b"}
