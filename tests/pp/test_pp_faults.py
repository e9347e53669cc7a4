"""A pipeline stage killed mid-generation under ``infercore serve``: the request errors within 10 s,
/health answers 503, and every process of the server is gone within 30 s."""

from __future__ import annotations

import pytest
from server_faults import kill_mid_stream_and_check, start_server

FLAGS = ["--max-model-len", "1024", "--num-gpu-blocks-override", "80", "--max-num-seqs", "4", "--cpu-threads", "1",
         "--served-model-name", "tiny", "--pipeline-parallel-size", "2"]


@pytest.mark.parametrize(("backend", "stage"), [
    ("mp", 0), pytest.param("mp", 1, marks=pytest.mark.heavy), pytest.param("ray", 1, marks=pytest.mark.heavy)])
def test_killed_stage_fails_request_health_503_and_everything_exits(tiny_model_factory, tmp_path, backend: str,
                                                                    stage: int) -> None:
    model = tiny_model_factory("Qwen3ForCausalLM")
    log = tmp_path / "server.log"
    proc, url = start_server(model, log, *FLAGS, "--distributed-executor-backend", backend)
    kill_mid_stream_and_check(proc, url, log, backend, lambda server, stages: stages[stage])
