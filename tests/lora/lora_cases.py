"""Tiny PEFT LoRA adapters written with peft, and HF + PEFT references (``merge_and_unload``) for them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from hf_oracle import hf_greedy
from transformers import AutoModelForCausalLM

from infercore import LoRARequest

#: Small engine settings (one torch thread: the CI machine has two cores).
ENGINE_ARGS = {"dtype": "float32", "max_model_len": 256, "max_num_seqs": 16, "cpu_threads": 1,
               "enable_lora": True, "max_lora_rank": 8}


@dataclass(frozen=True)
class AdapterCase:
    """An adapter to write: rank, alpha, rsLoRA, and the modules it targets."""

    name: str
    rank: int
    alpha: float
    targets: tuple[str, ...]
    use_rslora: bool = False


#: Three adapters of different ranks over different modules (all seven, attention only, MLP + o_proj).
ADAPTERS = (
    AdapterCase("a", 4, 8.0, ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")),
    AdapterCase("b", 8, 4.0, ("q_proj", "v_proj"), use_rslora=True),
    AdapterCase("c", 2, 2.0, ("o_proj", "gate_proj", "up_proj", "down_proj")),
)
#: Phi-3 keeps q/k/v and gate/up fused in its checkpoints; its adapters target the fused modules.
PHI3_TARGETS = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
                "up_proj": "gate_up_proj"}


def write_adapter(base: Path, folder: Path, case: AdapterCase, seed: int, phi3: bool = False) -> Path:
    """Save a PEFT adapter of ``case`` for the model in ``base`` with random A and B."""
    from peft import LoraConfig, get_peft_model

    targets = sorted({PHI3_TARGETS.get(t, t) for t in case.targets} if phi3 else set(case.targets))
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=case.rank, lora_alpha=case.alpha, target_modules=targets,
                                            use_rslora=case.use_rslora, lora_dropout=0.0))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_" in name:
                param.normal_(0.0, 0.1)
    peft.save_pretrained(str(folder))
    return folder


def write_adapters(base: Path, root: Path, phi3: bool = False) -> dict[str, LoRARequest]:
    """The three :data:`ADAPTERS` for ``base``, as requests with ids 1, 2, 3."""
    return {case.name: LoRARequest(case.name, i + 1, str(write_adapter(base, root / case.name, case, seed=i + 1,
                                                                       phi3=phi3)))
            for i, case in enumerate(ADAPTERS)}


def hf_merged(base: Path, lora: LoRARequest | None) -> torch.nn.Module:
    """HF's model for ``base`` with ``lora`` merged into its weights (the base model for None)."""
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    if lora is None:
        return model
    from peft import PeftModel

    return PeftModel.from_pretrained(model, lora.lora_path).merge_and_unload()


def hf_references(base: Path, rows: list[tuple[list[int], LoRARequest | None]]) -> list:
    """HF + PEFT's greedy tokens and logprobs of each (prompt ids, adapter) row."""
    models: dict[int, torch.nn.Module] = {}
    refs = []
    for prompt_ids, lora in rows:
        key = 0 if lora is None else lora.lora_int_id
        if key not in models:
            models[key] = hf_merged(base, lora)
        refs.append(hf_greedy(models[key], prompt_ids))
    return refs


def assert_same_outputs(expected: list, got: list, tolerance: float = 1e-4) -> None:
    """Two engines' outputs of the same requests: the same greedy tokens, and top logprobs of the same tokens
    within ``tolerance``."""
    for want, have in zip(expected, got, strict=True):
        assert have.outputs[0].token_ids == want.outputs[0].token_ids
        for a, b in zip(want.outputs[0].logprobs, have.outputs[0].logprobs, strict=True):
            assert a.keys() == b.keys()
            assert all(abs(a[t].logprob - b[t].logprob) < tolerance for t in a)
