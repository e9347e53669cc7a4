"""The API server process imports what a front end needs, not the engine's model code: no layer, no loader, no
architecture (they load on first use of ``infercore.models``' names, in the engine's processes), and, serving a
text model, no torch at all."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from transformers import AutoTokenizer

_SCRIPT = """
import json, sys
import infercore.entrypoints.openai.app
engine = sorted(m for m in sys.modules if m.startswith(("infercore.layers", "infercore.models.loader",
                                                         "infercore.models.llama", "infercore.worker")))
torch_loaded = "torch" in sys.modules
from infercore.models import load_model, resolve_dtype
print(json.dumps({"engine_modules": engine, "lazy_names": [load_model.__name__, resolve_dtype.__name__],
                  "torch": torch_loaded}))
"""


def test_the_api_server_imports_no_model_code() -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["engine_modules"] == [], report["engine_modules"]
    assert report["lazy_names"] == ["load_model", "resolve_dtype"]
    assert report["torch"] is False, "importing the app imported torch"


def _maps_torch(pid: int) -> bool:
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="reads /proc/<pid>/maps (Linux)")
def test_a_serving_api_server_never_loads_torch_and_tokenizes_as_auto_tokenizer(start_server, model_dir: Path,
                                                                               tmp_path: Path) -> None:
    # The folder declares a tokenizer class AutoTokenizer overrides (LlamaTokenizerFast over a byte-level
    # tokenizer.json, with transformers 5.25): the API server's first guess is wrong, and the answer of the
    # process it asks corrects it.
    folder = tmp_path / "misdeclared"
    shutil.copytree(model_dir, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "LlamaTokenizerFast"}))
    server = start_server("--api-server-count", "1", model=folder)
    assert _maps_torch(server.engine_pid())  # the check sees torch where it is loaded
    text = "hello world, ünïcode <|im_end|> 123"
    ids = httpx.post(server.url + "/tokenize", json={"prompt": text}, timeout=60).json()["tokens"]
    assert ids == AutoTokenizer.from_pretrained(str(folder))(text).input_ids
    chat = httpx.post(server.url + "/v1/chat/completions", json={
        "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "response_format": {"type": "json_object"}}, timeout=120)  # the engine's first grammar: seconds on a busy CPU
    assert chat.status_code == 200, chat.text
    plain = httpx.post(server.url + "/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 3,
                                                              "logprobs": 2}, timeout=60)
    assert plain.status_code == 200, plain.text
    # Some transformers releases (5.17) import torch for every tokenizer class; with the others, no torch here.
    probe = "import sys, transformers; transformers.TokenizersBackend; print('torch' in sys.modules)"
    tokenizers_need_torch = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                           timeout=120).stdout.strip() == "True"
    assert _maps_torch(server.proc.pid) == tokenizers_need_torch
