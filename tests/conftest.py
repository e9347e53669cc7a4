"""Shared fixtures: tiny model folders built once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _no_gpu() -> bool:
    import torch

    return not torch.cuda.is_available()


# Without a GPU, Triton kernels run in its interpreter; the switch must precede any import of
# triton, which any test module may trigger through the plugins.
if _no_gpu():
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("INFERCORE_CACHE_DIR", str(Path(__file__).resolve().parent.parent / ".test-cache"))

ARCHITECTURES = ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"]


@pytest.fixture(scope="session")
def tiny_model_factory(tmp_path_factory: pytest.TempPathFactory):
    """Build (once) a tiny random-weight model folder of an architecture; returns its path."""
    from infercore.tiny_models import build_model_folder

    cache: dict[tuple, Path] = {}

    def make(architecture: str = "Qwen3ForCausalLM", **overrides) -> Path:
        key = (architecture, tuple(sorted(overrides.items())))
        if key not in cache:
            path = tmp_path_factory.mktemp(architecture)
            cache[key] = build_model_folder(path, architecture, **overrides)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def qwen3_folder(tiny_model_factory) -> Path:
    return tiny_model_factory("Qwen3ForCausalLM")
