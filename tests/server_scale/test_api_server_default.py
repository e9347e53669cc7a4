"""``--api-server-count``'s default: one API server per 4 usable CPUs, at most 4 (one process's HTTP and
streaming work falls behind a fast engine at high concurrency), one on a small machine, and one when adapters
may be loaded at run time (each process knows only the adapters it loaded). It is resolved once, in the config,
so every process of a server reads the same count."""

from __future__ import annotations

import pytest

from infercore import config as config_module
from infercore.config import InfercoreConfig, default_api_server_count


@pytest.mark.parametrize(("cpus", "count"), [(1, 1), (2, 1), (7, 1), (8, 2), (12, 3), (16, 4), (64, 4)])
def test_one_api_server_per_four_cpus_up_to_four(cpus: int, count: int) -> None:
    assert default_api_server_count(False, cpus) == count


def test_runtime_adapter_loading_keeps_one_api_server() -> None:
    assert default_api_server_count(True, 64) == 1


def test_the_config_resolves_the_default_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module, "available_cpus", lambda: 16)
    config = InfercoreConfig()
    assert config.serve.api_server_count == 4
    # What the API servers and engines are sent carries the count, not "default" to resolve again.
    monkeypatch.setattr(config_module, "available_cpus", lambda: 2)
    assert InfercoreConfig.model_validate_json(config.model_dump_json()).serve.api_server_count == 4
    assert InfercoreConfig.from_kwargs(api_server_count=2).serve.api_server_count == 2
    updating = InfercoreConfig.from_kwargs(allow_runtime_lora_updating=True, enable_lora=True)
    assert updating.serve.api_server_count == 1
