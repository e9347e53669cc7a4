"""`infercore bench throughput --workload w-gpu-embed`: embedding throughput beside sentence-transformers.

Two model shapes, each with random weights saved once to a folder both engines load: a BERT-large
encoder (335M, CLS pooling, normalized; BGE-large's shape) and Qwen3-Embedding-0.6B (LAST pooling,
normalized). 4,096 inputs of 32 to 512 random token ids each, given as token ids to both sides (no
tokenizing is timed). The peer is sentence-transformers' forward pass over its own batching (inputs
sorted by length, padded batches of ``--peer-batch-size``), or HF transformers with SDPA attention and
the pooling done by hand when sentence-transformers is not installed. A few embeddings of each side
are compared (cosine) so a fast wrong answer is visible.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infercore.version import __version__


@dataclass(frozen=True)
class EmbedShape:
    """One model shape of an embedding workload and how it pools."""

    label: str
    model_config: dict[str, Any]
    pooling: str  # CLS | MEAN | LAST
    max_model_len: int


@dataclass(frozen=True)
class EmbedWorkload:
    """Model shapes and a seeded set of token-id inputs."""

    name: str
    shapes: tuple[EmbedShape, ...]
    num_inputs: int = 4096
    input_len: tuple[int, int] = (32, 512)
    token_id_range: tuple[int, int] = (1000, 20000)
    dtype: str = "bfloat16"
    engine_kwargs: dict[str, Any] = field(default_factory=dict)

    def inputs(self, seed: int = 0, count: int | None = None) -> list[list[int]]:
        rng = random.Random(seed)
        lo, hi = self.token_id_range
        return [[rng.randint(lo, hi) for _ in range(rng.randint(*self.input_len))]
                for _ in range(count or self.num_inputs)]


_BERT_LARGE = {
    "architectures": ["BertModel"], "model_type": "bert", "vocab_size": 30522, "hidden_size": 1024,
    "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16, "max_position_embeddings": 512,
    "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu", "pad_token_id": 0, "sep_token_id": 102,
}
_QWEN3_EMBEDDING_06B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151669, "hidden_size": 1024,
    "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
    "head_dim": 128, "tie_word_embeddings": True, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "max_position_embeddings": 32768, "hidden_act": "silu", "attention_bias": False, "eos_token_id": 0,
}

EMBED_WORKLOADS: dict[str, EmbedWorkload] = {
    "w-gpu-embed": EmbedWorkload(name="w-gpu-embed", shapes=(
        EmbedShape("bert-large-335m", _BERT_LARGE, "CLS", 512),
        EmbedShape("qwen3-embedding-0.6b", _QWEN3_EMBEDDING_06B, "LAST", 1024))),
}


def write_folder(shape: EmbedShape, dtype: str, path: Path) -> Path:
    """The shape's random weights (HF's init) with a sentence-transformers description of its pooling and a
    stand-in tokenizer (neither side tokenizes: inputs are token ids)."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    from infercore.pooling.tiny_encoders import _write_sentence_transformers, build_wordpiece_tokenizer

    config = dict(shape.model_config)
    model_type = config.pop("model_type")
    hf_config = AutoConfig.for_model(model_type, **config)
    torch.manual_seed(0)
    # A decoder is saved as its causal LM (the layout its checkpoints have); peers load its base model from it.
    auto = AutoModelForCausalLM if shape.pooling == "LAST" else AutoModel
    model = auto.from_config(hf_config, dtype=getattr(torch, dtype))
    model.config.architectures = shape.model_config["architectures"]
    model.save_pretrained(str(path), safe_serialization=True)
    build_wordpiece_tokenizer(path)
    _write_sentence_transformers(path, int(config["hidden_size"]), shape.pooling, normalize=True)
    return path


def run_infercore(shape: EmbedShape, folder: Path, workload: EmbedWorkload, inputs: list[list[int]],
                  args: argparse.Namespace) -> tuple[dict[str, Any], list[list[float]]]:
    from infercore import LLM

    kwargs: dict[str, Any] = dict(model=str(folder), dtype=workload.dtype, max_model_len=shape.max_model_len,
                                  skip_tokenizer_init=True, runner="pooling", **workload.engine_kwargs)
    if args.max_num_seqs:
        kwargs["max_num_seqs"] = args.max_num_seqs
    if args.max_num_batched_tokens:
        kwargs["max_num_batched_tokens"] = args.max_num_batched_tokens
    llm = LLM(**kwargs)
    try:
        prompts = [{"prompt_token_ids": ids} for ids in inputs]
        llm.embed(prompts[:16], use_tqdm=False)  # warm-up
        walls = []
        for _ in range(args.repeat):
            llm.reset_prefix_cache()
            start = time.perf_counter()
            # encode's embeddings are tensors (embed's are Python lists, as vLLM's): the peer's stay tensors too.
            outs = llm.encode(prompts, use_tqdm=not args.no_progress, pooling_task="embed")
            walls.append(time.perf_counter() - start)
    finally:
        llm.llm_engine.engine_core.shutdown()
    wall = sorted(walls)[len(walls) // 2]
    return _figures("infercore", __version__, inputs, wall), [o.outputs.data.tolist() for o in outs[: args.check]]


def _figures(engine: str, version: str, inputs: list[list[int]], wall: float) -> dict[str, Any]:
    tokens = sum(len(i) for i in inputs)
    return {"engine": engine, "version": version, "inputs": len(inputs), "tokens": tokens, "wall_s": round(wall, 3),
            "inputs_per_s": round(len(inputs) / wall, 1), "tokens_per_s": round(tokens / wall, 1)}


def _peer_model(shape: EmbedShape, folder: Path, dtype: str) -> tuple[str, str, Any]:
    """sentence-transformers over the folder (its modules: encoder, pooling, normalize), else HF with SDPA."""
    import torch

    try:
        import sentence_transformers

        model = sentence_transformers.SentenceTransformer(str(folder), device="cuda" if torch.cuda.is_available()
                                                          else "cpu", model_kwargs={"dtype": getattr(torch, dtype)})
        return "sentence-transformers", sentence_transformers.__version__, model
    except ImportError:
        import transformers
        from transformers import AutoModel

        model = AutoModel.from_pretrained(str(folder), dtype=getattr(torch, dtype), attn_implementation="sdpa")
        return "hf-transformers-sdpa", transformers.__version__, model.to("cuda" if torch.cuda.is_available() else "cpu")


def _peer_batch(engine: str, model: Any, shape: EmbedShape, batch: list[list[int]]) -> Any:
    """Embeddings of one length-sorted, right-padded batch."""
    import torch
    import torch.nn.functional as F

    device = next(model.parameters()).device
    longest = max(len(ids) for ids in batch)
    ids = torch.zeros((len(batch), longest), dtype=torch.long)
    mask = torch.zeros((len(batch), longest), dtype=torch.long)
    for row, seq in enumerate(batch):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    features = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
    if engine == "sentence-transformers":
        return model(features)["sentence_embedding"]
    hidden = model(**features).last_hidden_state
    if shape.pooling == "CLS":
        pooled = hidden[:, 0]
    elif shape.pooling == "LAST":
        pooled = hidden[torch.arange(len(batch), device=device), features["attention_mask"].sum(1) - 1]
    else:
        m = features["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * m).sum(1) / m.sum(1)
    return F.normalize(pooled.float(), dim=-1)


def run_peer(shape: EmbedShape, folder: Path, workload: EmbedWorkload, inputs: list[list[int]],
             args: argparse.Namespace) -> tuple[dict[str, Any], list[list[float]]]:
    import torch

    engine, version, model = _peer_model(shape, folder, workload.dtype)
    order = sorted(range(len(inputs)), key=lambda i: -len(inputs[i]))  # sentence-transformers' own order
    size = args.peer_batch_size
    results: list[Any] = [None] * len(inputs)
    with torch.inference_mode():
        _peer_batch(engine, model, shape, [inputs[i] for i in order[:size]])  # warm-up
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        for b in range(0, len(order), size):
            idx = order[b: b + size]
            out = _peer_batch(engine, model, shape, [inputs[i] for i in idx])
            for j, i in enumerate(idx):
                results[i] = out[j]
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
    figures = _figures(engine, version, inputs, wall)
    figures["batch_size"] = size
    return figures, [results[i].float().cpu().tolist() for i in range(args.check)]


def run(workload: EmbedWorkload, args: argparse.Namespace) -> int:
    """Each shape: infercore, then the peer on the same inputs, one JSON line each, then their ratio."""
    import torch
    import torch.nn.functional as F

    inputs = workload.inputs(args.seed, args.num_requests)
    for shape in workload.shapes:
        with tempfile.TemporaryDirectory(prefix="infercore-embed-") as tmp:
            folder = write_folder(shape, workload.dtype, Path(tmp) / shape.label)
            ours, our_vectors = run_infercore(shape, folder, workload, inputs, args)
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            theirs, their_vectors = run_peer(shape, folder, workload, inputs, args)
            agreement = min((float(F.cosine_similarity(torch.tensor(a), torch.tensor(b), dim=0))
                             for a, b in zip(our_vectors, their_vectors, strict=True)), default=None)
            common = {"workload": workload.name, "shape": shape.label, "pooling": shape.pooling}
            print(json.dumps({**common, **ours}), flush=True)
            print(json.dumps({**common, **theirs}), flush=True)
            print(json.dumps({**common, "ratio_infercore_over_peer": round(ours["inputs_per_s"] /
                                                                          theirs["inputs_per_s"], 2),
                              "min_cosine_infercore_vs_peer": agreement}), flush=True)
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    return 0
