"""Tiny random-weight GPT-2 model folders for tests and the conformance kit's end-to-end check."""

from __future__ import annotations

import json
from pathlib import Path

from infercore.plugin_api import build_model_folder


def build_gpt2_folder(path: str | Path, seed: int = 0) -> Path:
    """A GPT-2 folder (2 layers, 64 wide) with the tiny tokenizer of infercore's test models."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    path = build_model_folder(path, "Qwen3ForCausalLM", seed=seed)
    for stale in [*path.glob("*.safetensors"), *path.glob("*.safetensors.index.json"), path / "config.json",
                  path / "generation_config.json"]:
        stale.unlink(missing_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=64, n_layer=2, n_head=4, n_positions=256,
                        activation_function="gelu_new", eos_token_id=tokenizer.eos_token_id,
                        bos_token_id=tokenizer.eos_token_id, architectures=["GPT2LMHeadModel"])
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.normal_(0.0, 0.1)
    model.save_pretrained(str(path), safe_serialization=True)
    cfg = path / "generation_config.json"
    if cfg.exists():
        cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "eos_token_id": tokenizer.eos_token_id}))
    return path


def build_gpt_neox_folder(path: str | Path, seed: int = 0) -> Path:
    """A GPT-NeoX folder (2 layers, 64 wide, 4 heads, a quarter of each head rotated) with the same tokenizer."""
    import torch
    from transformers import AutoTokenizer, GPTNeoXConfig, GPTNeoXForCausalLM

    path = build_model_folder(path, "Qwen3ForCausalLM", seed=seed)
    for stale in [*path.glob("*.safetensors"), *path.glob("*.safetensors.index.json"), path / "config.json",
                  path / "generation_config.json"]:
        stale.unlink(missing_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    config = GPTNeoXConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=128, max_position_embeddings=256, rotary_pct=0.25,
                           use_parallel_residual=True, tie_word_embeddings=False,
                           eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
                           architectures=["GPTNeoXForCausalLM"])
    torch.manual_seed(seed)
    model = GPTNeoXForCausalLM(config)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.normal_(0.0, 0.1)
    model.save_pretrained(str(path), safe_serialization=True)
    return path
