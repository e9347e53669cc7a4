"""The ``ray`` executor on a local Ray cluster the test starts gives the tokens of one device (a killed
Ray worker is covered under ``infercore serve`` in test_worker_faults.py)."""

from __future__ import annotations

import pytest
import ray  # in the test extra (infercore[ray] for users)
from distributed_cases import greedy_tokens


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_tp2_on_ray_matches_tp1(ray_cluster, tiny_model_factory) -> None:
    model = tiny_model_factory("Qwen3ForCausalLM")
    expected = greedy_tokens(model)
    assert greedy_tokens(model, tensor_parallel_size=2, distributed_executor_backend="ray") == expected
