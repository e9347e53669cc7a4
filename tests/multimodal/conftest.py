"""Tiny LLaVA folders (CLIP and SigLIP towers, real HF image processors) built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PIL")


@pytest.fixture(scope="session")
def llava_clip_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infercore.tiny_vision_models import build_llava_folder

    return build_llava_folder(tmp_path_factory.mktemp("llava_clip"), tower="clip", text_architecture="LlamaForCausalLM")


@pytest.fixture(scope="session")
def llava_siglip_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infercore.tiny_vision_models import build_llava_folder

    return build_llava_folder(tmp_path_factory.mktemp("llava_siglip"), tower="siglip",
                              text_architecture="Qwen2ForCausalLM", seed=1)
