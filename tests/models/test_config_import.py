"""Reading a model's config imports no more of transformers than configs need: not its model registry
(``modeling_auto``, which drags in ``generation``, scikit-learn and ``torch._dynamo`` on some releases),
and the config read is the one ``AutoConfig`` gives. ``from infercore import LLM`` brings no server code."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from infercore.models import config_import, hf_config
from infercore.models.config_import import MODEL_REGISTRY, refused_registry, without_model_registry

_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 256}

#: A fresh interpreter reads each folder's config, then says which heavy modules came with it and whether
#: the config equals AutoConfig's own reading (done afterwards, with the registry importable again).
_SCRIPT = """
import json, sys
from infercore import LLM
LLM  # the lazy attribute imports the engine
server = [m for m in ("fastapi", "uvicorn", "starlette", "infercore.entrypoints.openai") if m in sys.modules]
from infercore.config import ModelConfig
from infercore.models.hf_config import get_hf_config
configs = [get_hf_config(ModelConfig(model=folder)) for folder in sys.argv[1:]]
heavy = [m for m in ("transformers.models.auto.modeling_auto", "transformers.generation.utils", "sklearn")
         if m in sys.modules]
from transformers import AutoConfig, AutoModelForCausalLM
refs = [AutoConfig.from_pretrained(folder) for folder in sys.argv[1:]]
print(json.dumps({"server": server, "heavy": heavy, "classes": [type(c).__name__ for c in configs],
                  "same": [type(c) is type(r) and c.to_dict() == r.to_dict() for c, r in zip(configs, refs)],
                  "registry_after": AutoModelForCausalLM.__name__}))
"""


def _folder(path: Path, architecture: str, model_type: str) -> str:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"architectures": [architecture], "model_type": model_type,
                                                   **_SHAPE}))
    return str(path)


def test_config_is_read_without_the_model_registry(tmp_path: Path) -> None:
    folders = [_folder(tmp_path / "llama", "LlamaForCausalLM", "llama"),
               _folder(tmp_path / "qwen3", "Qwen3ForCausalLM", "qwen3")]
    done = subprocess.run([sys.executable, "-c", _SCRIPT, *folders], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["server"] == []
    assert result["heavy"] == []
    assert result["classes"] == ["LlamaConfig", "Qwen3Config"]
    assert result["same"] == [True, True]
    assert result["registry_after"] == "AutoModelForCausalLM"


def test_the_refusal_holds_for_this_thread_within_the_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "registry_stand_in.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(config_import, "MODEL_REGISTRY", "registry_stand_in")
    monkeypatch.delitem(sys.modules, "registry_stand_in", raising=False)
    other: list[int] = []
    with without_model_registry():
        with pytest.raises(ModuleNotFoundError) as refused:
            __import__("registry_stand_in")
        assert refused.value.name == "registry_stand_in"
        thread = threading.Thread(target=lambda: other.append(__import__("registry_stand_in").VALUE))
        thread.start()
        thread.join()
    assert other == [1]  # another thread imports it meanwhile
    sys.modules.pop("registry_stand_in")
    assert __import__("registry_stand_in").VALUE == 1  # and this one after the block
    assert not any(type(f).__name__ == "_RefuseModule" for f in sys.meta_path)


class _FakeAutoConfig:
    def __init__(self, first_error: BaseException) -> None:
        self.first_error = first_error
        self.calls = 0

    def from_pretrained(self, path: str, trust_remote_code: bool = False) -> str:
        self.calls += 1
        if self.calls == 1:
            raise self.first_error
        return "config"


def test_a_release_that_needs_the_registry_reads_the_config_again(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    refusal = ModuleNotFoundError("refused", name=MODEL_REGISTRY)
    wrapped = RuntimeError("failed to import the config class")
    wrapped.__cause__ = refusal
    assert refused_registry(wrapped)
    fake = _FakeAutoConfig(wrapped)
    monkeypatch.setattr(hf_config, "AutoConfig", fake)
    assert hf_config._read_config(tmp_path, trust_remote_code=False) == "config"
    assert fake.calls == 2


def test_other_errors_are_raised_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeAutoConfig(ValueError("not a config"))
    monkeypatch.setattr(hf_config, "AutoConfig", fake)
    with pytest.raises(ValueError, match="not a config"):
        hf_config._read_config(tmp_path, trust_remote_code=False)
    assert fake.calls == 1
    assert not refused_registry(ModuleNotFoundError("other", name="sklearn"))
