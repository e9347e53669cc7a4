"""Two pipeline stages as Ray actors (on a local Ray cluster the test starts) give the greedy tokens of
one stage, for every architecture (heavy: the ray executor's start-up is slow on two cores)."""

from __future__ import annotations

import pytest
import ray  # in the test extra (infercore[ray] for users)
from pp_cases import greedy_tokens

from infercore.tiny_models import TINY_ARCHITECTURES

CASES = [pytest.param(arch, marks=pytest.mark.heavy)
         for arch in TINY_ARCHITECTURES]


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("architecture", CASES)
def test_pp2_on_ray_matches_pp1(ray_cluster, tiny_model_factory, architecture: str) -> None:
    model = tiny_model_factory(architecture)
    expected = greedy_tokens(model)
    assert greedy_tokens(model, pipeline_parallel_size=2, distributed_executor_backend="ray") == expected
