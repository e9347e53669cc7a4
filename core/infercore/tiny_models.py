"""Tiny Hugging Face model folders with random weights and a trained byte-level BPE tokenizer.

Used by the built-in demo model and by tests: a folder made here loads exactly like one from the
hub (config.json, safetensors, tokenizer.json, tokenizer_config.json with a chat template).
Everything is deterministic for a given seed and takes seconds.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

#: A ChatML template with tools, tool calls, tool results and optional thinking, in the style of
#: Qwen's templates.
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n<tools>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools>\n"
    "Reply with <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call> to call one.<|im_end|>\n"
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' %}"
    "{% elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content if message.content is string else '' }}"
    "{% if message.tool_calls %}{% for call in message.tool_calls %}"
    "{% set fn = call.function if call.function is defined else call %}"
    "\n<tool_call>\n{\"name\": \"{{ fn.name }}\", \"arguments\": "
    "{{ fn.arguments if fn.arguments is string else fn.arguments | tojson }}}\n</tool_call>"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)

DEFAULT_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: Added (non-special) tokens the tool-call and reasoning formats of common models use.
DEFAULT_ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>"]

_WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more write "
    "go see number no way could people my than first water been call who oil its now find long down day did "
    "get come made may part model token engine cache block request server stream json tool call weather city "
    "paris london tokyo temperature celsius query search result name arguments function value true false null"
).split()
_EXTRA_TEXT = [
    "你好，世界！这是一个测试。日本語のテキストです。한국어 텍스트.",
    "emoji: 😀 🚀 ✨ 👍🏽 🇫🇷 — naïve café résumé façade",
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    "def add(a, b):\n    return a + b\n\nprint(add(1, 2))",
    "[get_weather(city='Paris'), search(query=\"x\")]",
]


def training_corpus(seed: int = 0, lines: int = 400) -> list[str]:
    """Deterministic mixed-language text to train the tiny tokenizer on."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 16))]
        if i % 3 == 0:
            words[0] = words[0].capitalize()
        out.append(" ".join(words) + rng.choice([".", "?", "!", ",", ":"]))
    return out + _EXTRA_TEXT * 4


def build_tokenizer(path: str | Path, vocab_size: int = 512, seed: int = 0,
                    special_tokens: list[str] | None = None, added_tokens: list[str] | None = None,
                    chat_template: str | None = CHAT_TEMPLATE) -> Path:
    """Train a byte-level BPE tokenizer and save it as a Hugging Face tokenizer folder.

    ``special_tokens`` (default ChatML's) are special; ``added_tokens`` are added as whole tokens
    that still appear in decoded text (as tool-call markers do in real models).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    special = list(special_tokens or DEFAULT_SPECIAL_TOKENS)
    added = list(DEFAULT_ADDED_TOKENS if added_tokens is None else added_tokens)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(seed), trainer=trainer)
    if added:
        from tokenizers import AddedToken
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=special[0], pad_token=special[0],
                                   bos_token=None, unk_token=None)
    if chat_template:
        fast.chat_template = chat_template
    fast.save_pretrained(str(path))
    if "<|im_end|>" in special:
        # Chat models end a turn with <|im_end|>: make it the generation EOS as Qwen does.
        cfg_path = path / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["eos_token"] = "<|im_end|>"
        cfg_path.write_text(json.dumps(cfg, indent=2))
    return path


#: Per-architecture tiny config (vocab_size is set from the tokenizer).
_ARCH_CONFIGS: dict[str, dict[str, Any]] = {
    "LlamaForCausalLM": {"model_type": "llama", "rope_theta": 10000.0},
    "MistralForCausalLM": {"model_type": "mistral", "rope_theta": 10000.0, "sliding_window": None},
    "Qwen2ForCausalLM": {"model_type": "qwen2", "rope_theta": 10000.0},
    "Qwen3ForCausalLM": {"model_type": "qwen3", "rope_theta": 10000.0, "head_dim": 16},
    # Three layers (sliding, sliding, global), a window shorter than most test sequences, different rope
    # per layer kind, a query scale that differs from the head size and a final logit cap.
    "Gemma3ForCausalLM": {"model_type": "gemma3_text", "head_dim": 16, "num_hidden_layers": 3,
                          "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
                          "sliding_window": 8, "query_pre_attn_scalar": 24, "final_logit_softcapping": 5.0,
                          "tie_word_embeddings": True, "rope_parameters": {
                              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                              "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0}}},
    "Phi3ForCausalLM": {"model_type": "phi3", "rope_theta": 10000.0, "sliding_window": None,
                        "original_max_position_embeddings": 2048, "eos_token_id": None, "pad_token_id": None},
    "Qwen3MoeForCausalLM": {"model_type": "qwen3_moe", "rope_theta": 10000.0, "head_dim": 16, "num_experts": 8,
                            "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": True,
                            "decoder_sparse_step": 1, "mlp_only_layers": []},
    "MixtralForCausalLM": {"model_type": "mixtral", "rope_theta": 10000.0, "sliding_window": None,
                           "num_local_experts": 4, "num_experts_per_tok": 2},
}


#: The architectures :func:`build_model_folder` and :func:`tiny_config` can make.
TINY_ARCHITECTURES: tuple[str, ...] = tuple(_ARCH_CONFIGS)


def check_tiny_architecture(architecture: str) -> None:
    """Raise a ValueError naming the architectures there are tiny configs for, unless ``architecture`` is one."""
    if architecture not in _ARCH_CONFIGS:
        raise ValueError(f"there is no tiny config for architecture {architecture!r}; choose one of "
                         f"{', '.join(TINY_ARCHITECTURES)}, or build a folder with one of them and replace its "
                         "config.json and weights with your model's (save_pretrained of a small config)")


def tiny_config(architecture: str, vocab_size: int, **overrides: Any) -> Any:
    """A transformers config of ``architecture`` small enough for CPU tests (2 layers, GQA)."""
    from transformers import AutoConfig

    check_tiny_architecture(architecture)
    base = dict(_ARCH_CONFIGS[architecture])
    model_type = base.pop("model_type")
    params: dict[str, Any] = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        rms_norm_eps=1e-6, tie_word_embeddings=False, architectures=[architecture],
    )
    params.update(base)
    params.update(overrides)
    return AutoConfig.for_model(model_type, **params)


def set_generation_eos(path: Path, eos_token_id: int) -> None:
    """Make ``eos_token_id`` the stop token of the folder's ``generation_config.json``, when it has one."""
    gen = path / "generation_config.json"
    if gen.exists():
        cfg = json.loads(gen.read_text())
        cfg["eos_token_id"] = eos_token_id
        gen.write_text(json.dumps(cfg, indent=2))


def build_model_folder(path: str | Path, architecture: str = "Qwen3ForCausalLM", seed: int = 0,
                       dtype: str = "float32", tokenizer_kwargs: dict[str, Any] | None = None,
                       max_shard_size: str | None = None, **config_overrides: Any) -> Path:
    """Write a random-weight HF model folder with its tokenizer; returns the folder. ``architecture`` is
    one of :data:`TINY_ARCHITECTURES` (checked before anything is written)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_tiny_architecture(architecture)
    path = Path(path)
    build_tokenizer(path, seed=seed, **(tokenizer_kwargs or {}))
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    config = tiny_config(architecture, vocab_size=len(tokenizer), **config_overrides)
    config.eos_token_id = tokenizer.eos_token_id
    config.bos_token_id = None
    config.pad_token_id = tokenizer.pad_token_id
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    with torch.no_grad():
        # Wider random weights than HF's init so greedy outputs vary from token to token.
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.1)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(str(path), safe_serialization=True, **kwargs)
    set_generation_eos(path, tokenizer.eos_token_id)
    return path
