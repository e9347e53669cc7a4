"""LoRA adapters through `infercore serve`: the request's ``model`` picks the adapter (official client),
``/v1/models`` lists adapters with their ``parent``, adapters load and unload at run time, and a bad
adapter is a 400 (or an unknown one a 404) that says why."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
import torch

PROMPT = "The engine cache block request server stream"


def _write_adapter(base, folder, rank: int, seed: int):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=["q_proj", "v_proj",
                                                                                          "down_proj"]))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_" in name:
                param.normal_(0.0, 0.1)
    peft.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def adapters(model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("server-loras")
    return {"adapter-a": _write_adapter(model_dir, root / "a", 4, 1), "adapter-b": _write_adapter(model_dir, root / "b", 8, 2)}


@pytest.fixture(scope="module")
def lora_server(start_server, adapters):
    return start_server("--enable-lora", "--max-loras", "2", "--max-lora-rank", "8", "--allow-runtime-lora-updating",
                        "--lora-modules", f"adapter-a={adapters['adapter-a']}")


@pytest.fixture(scope="module")
def client(lora_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=lora_server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def offline(model_dir, adapters):
    from infercore import LLM, LoRARequest, SamplingParams

    llm = LLM(str(model_dir), max_model_len=256, num_gpu_blocks_override=128, enable_lora=True, max_lora_rank=8)
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    loras = [None, LoRARequest("adapter-a", 1, str(adapters["adapter-a"])),
             LoRARequest("adapter-b", 2, str(adapters["adapter-b"]))]
    outs = llm.generate([PROMPT] * 3, params, use_tqdm=False, lora_request=loras)
    llm.llm_engine.engine_core.shutdown()
    return {"tiny": outs[0].outputs[0].text, "adapter-a": outs[1].outputs[0].text, "adapter-b": outs[2].outputs[0].text}


def _complete(client: openai.OpenAI, model: str) -> str:
    return client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text


def test_the_model_field_picks_the_adapter(client, offline) -> None:
    assert _complete(client, "adapter-a") == offline["adapter-a"]
    assert _complete(client, "tiny") == offline["tiny"]
    assert offline["adapter-a"] != offline["tiny"]
    chat = client.chat.completions.create(model="adapter-a", messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=4)
    assert chat.choices[0].message.content is not None


def test_models_lists_adapters_with_their_parent(client, adapters) -> None:
    cards = {m.id: m for m in client.models.list().data}
    assert cards["adapter-a"].parent == "tiny" and cards["adapter-a"].root == str(adapters["adapter-a"])
    assert client.models.retrieve("adapter-a").parent == "tiny"


def test_an_unknown_model_is_a_404_naming_the_served_ones(client) -> None:
    with pytest.raises(openai.NotFoundError, match="adapter-a"):
        _complete(client, "adapter-zzz")


def test_adapters_load_and_unload_at_run_time(lora_server, client, adapters, offline, tmp_path) -> None:
    url = lora_server.url
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "modules_to_save": ["lm_head"]}))
    (bad / "adapter_model.safetensors").write_bytes(b"")
    reply = httpx.post(url + "/v1/load_lora_adapter", json={"lora_name": "bad", "lora_path": str(bad)})
    assert reply.status_code == 400 and "modules_to_save" in reply.json()["error"]["message"]
    reply = httpx.post(url + "/v1/load_lora_adapter", json={"lora_name": "big", "lora_path": str(tmp_path / "none")})
    assert reply.status_code == 400 and "no adapter_config.json" in reply.json()["error"]["message"]
    reply = httpx.post(url + "/v1/load_lora_adapter",
                       json={"lora_name": "adapter-b", "lora_path": str(adapters["adapter-b"])})
    assert reply.status_code == 200, reply.text
    assert _complete(client, "adapter-b") == offline["adapter-b"]
    assert _complete(client, "adapter-a") == offline["adapter-a"]
    assert httpx.post(url + "/v1/unload_lora_adapter", json={"lora_name": "adapter-b"}).status_code == 200
    with pytest.raises(openai.NotFoundError):
        _complete(client, "adapter-b")
    assert httpx.post(url + "/v1/unload_lora_adapter", json={"lora_name": "adapter-b"}).status_code == 404
