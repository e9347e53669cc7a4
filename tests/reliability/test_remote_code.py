"""No code from a model folder runs unless the user passes trust_remote_code: a folder whose config and
tokenizer config point (``auto_map``) at Python files is loaded with the built-in classes, or refused
with advice, and the files never run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from infercore import LLM, SamplingParams
from infercore.config import InfercoreConfig

#: Each file of "remote code" leaves a mark in the model folder when it is imported (transformers
#: imports a copy of it from its modules cache, so the folder is named in full).
PAYLOAD = "from pathlib import Path\n(Path({folder!r}) / 'RAN-{name}').write_text('ran')\n"
CODE_FILES = ["configuration_custom", "modeling_custom", "tokenization_custom"]
AUTO_MAP = {"AutoConfig": "configuration_custom.CustomConfig",
            "AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}


def _marks(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("RAN-*"))


def _with_remote_code(source: Path, target: Path, model_type: str | None = None) -> Path:
    """A copy of ``source`` whose configs name code files in the folder (and, optionally, a model type
    that only the code defines)."""
    shutil.copytree(source, target)
    for name in CODE_FILES:
        (target / f"{name}.py").write_text(PAYLOAD.format(folder=str(target), name=name))
    config = json.loads((target / "config.json").read_text())
    config["auto_map"] = AUTO_MAP
    if model_type is not None:
        config["model_type"] = model_type
        config["architectures"] = ["CustomForCausalLM"]
    (target / "config.json").write_text(json.dumps(config))
    tokenizer_config = json.loads((target / "tokenizer_config.json").read_text())
    tokenizer_config["auto_map"] = {"AutoTokenizer": ["tokenization_custom.CustomTokenizer", None]}
    (target / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return target


def test_trust_remote_code_is_off_by_default() -> None:
    assert InfercoreConfig.from_kwargs(model="m").model.trust_remote_code is False


def test_known_architecture_with_auto_map_loads_without_running_the_code(qwen3_folder, tmp_path) -> None:
    folder = _with_remote_code(qwen3_folder, tmp_path / "model")
    llm = LLM(model=str(folder), max_model_len=64, num_gpu_blocks_override=16)
    out = llm.generate(["hello"], SamplingParams(max_tokens=3, temperature=0), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 3
    assert _marks(folder) == []


def test_unknown_architecture_that_needs_code_is_refused_with_advice(qwen3_folder, tmp_path) -> None:
    folder = _with_remote_code(qwen3_folder, tmp_path / "model", model_type="custom_remote")
    with pytest.raises(ValueError, match="trust_remote_code"):
        LLM(model=str(folder), max_model_len=64, num_gpu_blocks_override=16)
    assert _marks(folder) == []


def test_trust_remote_code_does_run_it(qwen3_folder, tmp_path) -> None:
    # The control: the same folder runs its code once the user asks, so the marks above mean something.
    folder = _with_remote_code(qwen3_folder, tmp_path / "model", model_type="custom_remote")
    script = ("import sys\nfrom infercore.config import ModelConfig\nfrom infercore.models.hf_config import "
              "get_hf_config\ntry:\n    get_hf_config(ModelConfig(model=sys.argv[1], trust_remote_code=True))\n"
              "except Exception:\n    pass\n")
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "hf_modules")}
    subprocess.run([sys.executable, "-c", script, str(folder)], env=env, check=True, timeout=120)
    assert "RAN-configuration_custom" in _marks(folder)


def test_serve_runs_no_code_from_the_folder(qwen3_folder, tmp_path, start) -> None:
    folder = _with_remote_code(qwen3_folder, tmp_path / "model")
    server = start(folder, env={"HF_MODULES_CACHE": str(tmp_path / "hf_modules")})
    reply = httpx.post(server.url + "/v1/chat/completions", timeout=60,
                       json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert reply.status_code == 200
    assert _marks(folder) == []
