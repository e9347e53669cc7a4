"""The example out-of-tree plugin (acme platform, GPT-2 model) loads, runs and serves through the
plugin API alone: the loader owns the dtype, missing weights are named, and a platform that cannot
profile memory gets the documented KV budget."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file

from infercore.config import InfercoreConfig
from infercore.models.loader import load_model
from infercore.platforms import set_current_platform
from infercore.platforms.interface import UNPROFILED_KV_FRACTION


@pytest.fixture
def acme(monkeypatch: pytest.MonkeyPatch):
    """Make the acme platform the current one for an in-process engine."""
    monkeypatch.setenv("INFERCORE_PLATFORM", "acme")
    set_current_platform(None)
    yield
    set_current_platform(None)


def test_loader_builds_a_plugin_model_in_the_requested_dtype(gpt2_folder: Path) -> None:
    model = load_model(InfercoreConfig.from_kwargs(model=str(gpt2_folder)), torch.device("cpu"), torch.bfloat16)
    dtypes = {p.dtype for p in model.parameters()}
    assert dtypes == {torch.bfloat16}, "the plugin model never casts itself; the loader must build it in bf16"
    assert torch.get_default_dtype() == torch.float32, "the loader must restore torch's default dtype"


def test_a_weight_missing_from_a_plugin_model_is_named(gpt2_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "gpt2-incomplete"
    shutil.copytree(gpt2_folder, folder)
    weights = load_file(str(folder / "model.safetensors"))
    del weights["transformer.ln_f.bias"]
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"did not fill 1 parameter\(s\) of GPT2LMHeadModel: transformer.ln_f.bias"):
        load_model(InfercoreConfig.from_kwargs(model=str(folder)), torch.device("cpu"), torch.float32)


def test_platform_without_profiling_gets_the_documented_budget(acme, gpt2_folder: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from infercore_acme.platform import AcmePlatform

    from infercore import LLM, SamplingParams

    free = 64 << 20
    monkeypatch.setattr(AcmePlatform, "free_memory", lambda self, index=0: free)
    llm = LLM(model=str(gpt2_folder), max_model_len=256, max_num_seqs=64)
    page = 2 * (2 * 16 * 4 * 16 * 4)  # 2 layers x (K and V x block 16 x 4 heads x 16 dims x float32)
    # 1024 blocks: below the 64 x 16 + 1 that max_num_seqs full contexts would need, so the rule decides.
    assert llm.llm_engine.model_info.num_kv_blocks == int(free * UNPROFILED_KV_FRACTION) // page == 1024
    out = llm.generate(["hello"], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)[0]
    assert len(out.outputs[0].token_ids) == 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_example_plugin_serves(gpt2_folder: Path, tmp_path: Path) -> None:
    port = _free_port()
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "infercore.entrypoints.cli", "serve", str(gpt2_folder),
                             "--port", str(port), "--max-model-len", "256"], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "INFERCORE_PLATFORM": "acme"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not become healthy"
            time.sleep(0.5)
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        reply = httpx.post(url + "/v1/completions", timeout=60,
                           json={"model": model, "prompt": "hello there", "max_tokens": 5, "temperature": 0})
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 5
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def test_async_scheduling_follows_its_own_capability(acme, gpt2_folder: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A platform without graph capture (like XPU) still gets async scheduling when it says so."""
    import dataclasses

    from infercore_acme.platform import AcmePlatform

    from infercore import LLM

    caps = dataclasses.replace(AcmePlatform.capabilities, async_scheduling=True, graph_capture=False)
    monkeypatch.setattr(AcmePlatform, "capabilities", caps)
    llm = LLM(model=str(gpt2_folder), max_model_len=128, kv_cache_memory_bytes=8 << 20)
    assert llm.llm_engine.engine_core.async_mode is True
