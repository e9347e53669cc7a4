"""``build_model_folder`` refuses an architecture it has no tiny config for, in a sentence, writing nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from infercore.plugin_api import build_model_folder


def test_an_unknown_architecture_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    folder = tmp_path / "neox"
    with pytest.raises(ValueError, match=r"no tiny config for architecture 'GPTNeoXForCausalLM'; choose one of "
                                         r"LlamaForCausalLM, .*Qwen3ForCausalLM"):
        build_model_folder(folder, architecture="GPTNeoXForCausalLM")
    assert not folder.exists() or not any(folder.iterdir())
