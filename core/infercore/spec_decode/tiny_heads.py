"""EAGLE-3 head folders in the public checkpoint layout, with random weights, for any target's shape.

For tests (a head over a tiny target: random drafts, so the output must still be the target's) and for
benchmarks (``weights=False`` writes the config only, for ``load_format="dummy"`` runs).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch


def build_eagle3_head_folder(path: str | Path, target_folder: str | Path, *, draft_vocab_size: int | None = None,
                             weights: bool = True, seed: int = 0, eagle3: bool = True) -> Path:
    """Write ``config.json`` (and, with ``weights``, ``model.safetensors``) of an EAGLE-3 head for the
    target in ``target_folder``; the draft vocabulary is a random subset of the target's. ``eagle3=False``
    writes an EAGLE-1 head instead (``fc`` over ``cat(embed, h)``, ``layers.0.*``, the target's vocabulary)."""
    target = json.loads((Path(target_folder) / "config.json").read_text())
    text = target.get("text_config", target)
    hidden, vocab = int(text["hidden_size"]), int(text["vocab_size"])
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or hidden // heads)
    draft_vocab = min(draft_vocab_size or vocab, vocab) if eagle3 else vocab
    config = {
        "architectures": ["LlamaForCausalLMEagle3" if eagle3 else "EagleLlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": int(text.get("intermediate_size", 4 * hidden)), "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": head_dim, "num_hidden_layers": 1,
        "rms_norm_eps": float(text.get("rms_norm_eps", 1e-6)), "vocab_size": vocab, "draft_vocab_size": draft_vocab,
        "rope_theta": float(text.get("rope_theta", 10000.0)),
        "max_position_embeddings": int(text.get("max_position_embeddings", 4096)), "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    if weights:
        from safetensors.torch import save_file

        tensors = _random_weights(config, seed)
        if not eagle3:
            tensors = _eagle1_weights(tensors, config)
        save_file(tensors, str(folder / "model.safetensors"))
    return folder


def _random_weights(config: dict, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    hidden, heads, kv_heads = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    head_dim, inter = config["head_dim"], config["intermediate_size"]
    vocab, draft_vocab = config["vocab_size"], config["draft_vocab_size"]

    def rand(*shape: int) -> torch.Tensor:
        return (torch.rand(shape, generator=generator) - 0.5) * (2.0 / shape[-1] ** 0.5)

    chosen = torch.randperm(vocab, generator=generator)[:draft_vocab].sort().values
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[chosen] = True
    return {
        "fc.weight": rand(hidden, 3 * hidden),
        "midlayer.input_layernorm.weight": torch.ones(hidden),
        "midlayer.hidden_norm.weight": torch.ones(hidden),
        "midlayer.post_attention_layernorm.weight": torch.ones(hidden),
        "midlayer.self_attn.q_proj.weight": rand(heads * head_dim, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": rand(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": rand(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": rand(hidden, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": rand(inter, hidden),
        "midlayer.mlp.up_proj.weight": rand(inter, hidden),
        "midlayer.mlp.down_proj.weight": rand(hidden, inter),
        "norm.weight": torch.ones(hidden),
        "lm_head.weight": rand(draft_vocab, hidden),
        "d2t": chosen - torch.arange(draft_vocab),
        "t2d": t2d,
    }


def _eagle1_weights(eagle3: dict[str, torch.Tensor], config: dict) -> dict[str, torch.Tensor]:
    """EAGLE-1's layout from the same random draws: ``fc`` [H, 2H] with a bias, the layer as ``layers.0``
    (its attention over H, no input norm), no vocabulary maps or head of its own."""
    hidden = config["hidden_size"]
    out = {"fc.weight": eagle3["fc.weight"][:, : 2 * hidden].contiguous(), "fc.bias": torch.zeros(hidden)}
    for name, tensor in eagle3.items():
        if name.startswith("midlayer.") and "layernorm" not in name and "hidden_norm" not in name:
            if name.split(".")[-2] in ("q_proj", "k_proj", "v_proj"):
                tensor = tensor[:, :hidden].contiguous()
            out["layers.0." + name.removeprefix("midlayer.")] = tensor
    out["layers.0.post_attention_layernorm.weight"] = eagle3["midlayer.post_attention_layernorm.weight"]
    return out
