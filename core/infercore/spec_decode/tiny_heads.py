"""EAGLE-3 head folders in the public checkpoint layout, with random weights, for any target's shape.

For tests (a head over a tiny target: random drafts, so the output must still be the target's) and for
benchmarks (``weights=False`` writes the config only, for ``load_format="dummy"`` runs).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch


def build_eagle3_head_folder(path: str | Path, target_folder: str | Path, *, draft_vocab_size: int | None = None,
                             weights: bool = True, seed: int = 0) -> Path:
    """Write ``config.json`` (and, with ``weights``, ``model.safetensors``) of an EAGLE-3 head for the
    target in ``target_folder``; the draft vocabulary is a random subset of the target's."""
    target = json.loads((Path(target_folder) / "config.json").read_text())
    text = target.get("text_config", target)
    hidden, vocab = int(text["hidden_size"]), int(text["vocab_size"])
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or hidden // heads)
    draft_vocab = min(draft_vocab_size or vocab, vocab)
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": hidden,
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

        save_file(_random_weights(config, seed), str(folder / "model.safetensors"))
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
