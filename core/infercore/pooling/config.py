"""How a model pools: the engine's pooling options and their resolution from the model folder.

``runner="pooling"`` (``--runner pooling``) runs prompts and returns pooled results instead of tokens;
``convert`` and the older ``task`` name what a generative checkpoint is used as (vLLM's names).
Defaults come from a sentence-transformers folder (``modules.json``, ``1_Pooling/config.json``,
``2_Normalize``) or the model's config, and ``pooler_config`` overrides them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infercore.config import PoolingRunnerConfig
from infercore.pooling.methods import PoolingType

#: Architectures that only pool (no LM head): the runner defaults to pooling for them.
EMBEDDING_ARCHITECTURES = frozenset({"BertModel", "XLMRobertaModel", "RobertaModel"})
CLASSIFIER_SUFFIXES = ("ForSequenceClassification",)
#: Architectures whose attention is bidirectional (no KV cache, no chunked prefill, no prefix cache).
ENCODER_ONLY_ARCHITECTURES = frozenset({
    "BertModel", "XLMRobertaModel", "RobertaModel", "BertForSequenceClassification",
    "XLMRobertaForSequenceClassification", "RobertaForSequenceClassification"})


@dataclass(frozen=True)
class PoolerSettings:
    """The model's resolved pooler: method and defaults of the per-request options."""

    pooling_type: PoolingType
    normalize: bool
    activation: bool
    #: Matryoshka: whether ``dimensions`` may truncate embeddings, and the sizes it may take (None: any).
    is_matryoshka: bool = False
    matryoshka_dimensions: tuple[int, ...] | None = None
    step_tag_id: int | None = None
    returned_token_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class PoolingModelInfo:
    """What the front end and the engine know of a pooling model."""

    pooler: PoolerSettings
    #: The tasks the model serves: "embed" for embedders, "classify" and "score" for classifiers.
    tasks: tuple[str, ...]
    encoder_only: bool
    hidden_size: int
    num_labels: int = 0
    #: Longest sequence the position table holds (XLM-R's starts after its padding index), if known.
    max_positions: int | None = None


def _as_dict(value: dict[str, Any] | str | None, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} must be a JSON object, got {value!r}: {exc}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"{name} must be a JSON object, got {value!r}")
    return parsed


def wants_pooling(options: PoolingRunnerConfig, architecture: str) -> bool:
    """Whether the engine runs the pooling runner for a checkpoint of ``architecture``."""
    if options.runner != "auto":
        return options.runner == "pooling"
    if options.convert not in ("auto", "none") or options.task in ("embed", "embedding", "classify", "score", "reward"):
        return True
    return architecture in EMBEDDING_ARCHITECTURES or architecture.endswith(CLASSIFIER_SUFFIXES)


def sentence_transformers_defaults(folder: Path) -> dict[str, Any]:
    """Pooler defaults from a sentence-transformers folder (empty when it is not one)."""
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return {}
    out: dict[str, Any] = {"normalize": False}
    for module in json.loads(modules_file.read_text()):
        kind = str(module.get("type", ""))
        path = folder / str(module.get("path", ""))
        if kind.endswith("Pooling") and (path / "config.json").is_file():
            cfg = json.loads((path / "config.json").read_text())
            if cfg.get("pooling_mode_cls_token"):
                out["pooling_type"] = "CLS"
            elif cfg.get("pooling_mode_lasttoken"):
                out["pooling_type"] = "LAST"
            elif cfg.get("pooling_mode_mean_tokens"):
                out["pooling_type"] = "MEAN"
        elif kind.endswith("Normalize"):
            out["normalize"] = True
    return out


def _tasks(architecture: str, convert: str, task: str | None) -> tuple[str, ...]:
    if convert == "classify" or task in ("classify", "score") or architecture.endswith(CLASSIFIER_SUFFIXES):
        return ("classify", "score")
    if convert == "reward" or task == "reward":
        return ("encode",)
    return ("embed", "score", "encode")


def resolve_pooling(options: PoolingRunnerConfig, folder: Path, hf_config: Any) -> PoolingModelInfo:
    """The pooling model's resolved settings: sentence-transformers folder defaults, then the model
    config's (``is_matryoshka``, ``num_labels``), then ``pooler_config``."""
    architecture = (getattr(hf_config, "architectures", None) or [""])[0]
    tasks = _tasks(architecture, options.convert, options.task)
    encoder_only = architecture in ENCODER_ONLY_ARCHITECTURES
    classify = "classify" in tasks
    if encoder_only:
        default_type = "CLS"
    else:
        default_type = "LAST" if tasks != ("encode",) else "ALL"
    merged: dict[str, Any] = {"pooling_type": default_type, "normalize": not classify, "activation": True}
    merged.update(sentence_transformers_defaults(folder))
    if getattr(hf_config, "is_matryoshka", False) or getattr(hf_config, "matryoshka_dimensions", None):
        merged["is_matryoshka"] = True
        dims = getattr(hf_config, "matryoshka_dimensions", None)
        merged["matryoshka_dimensions"] = tuple(dims) if dims else None
    overrides = _as_dict(options.pooler_config, "pooler_config")
    if "softmax" in overrides and "activation" not in overrides:
        overrides["activation"] = overrides.pop("softmax")
    unknown = sorted(set(overrides) - {"pooling_type", "normalize", "activation", "dimensions", "is_matryoshka",
                                       "matryoshka_dimensions", "step_tag_id", "returned_token_ids", "softmax",
                                       "enable_chunked_processing"})
    if unknown:
        raise ValueError(f"pooler_config has unknown field(s) {', '.join(unknown)}; known: pooling_type, normalize, "
                         "activation, dimensions, is_matryoshka, matryoshka_dimensions, step_tag_id, returned_token_ids")
    merged.update({k: v for k, v in overrides.items() if k not in ("softmax", "enable_chunked_processing", "dimensions")})
    returned = merged.get("returned_token_ids")
    dims = merged.get("matryoshka_dimensions")
    settings = PoolerSettings(
        pooling_type=PoolingType.parse(str(merged["pooling_type"])), normalize=bool(merged["normalize"]),
        activation=bool(merged["activation"]), is_matryoshka=bool(merged.get("is_matryoshka", False)),
        matryoshka_dimensions=tuple(dims) if dims else None, step_tag_id=merged.get("step_tag_id"),
        returned_token_ids=tuple(returned) if returned else None)
    text = getattr(hf_config, "get_text_config", lambda: hf_config)()
    num_labels = int(getattr(hf_config, "num_labels", 0) or 0) if classify else 0
    max_positions = None
    if encoder_only and getattr(hf_config, "max_position_embeddings", None):
        offset = int(getattr(hf_config, "pad_token_id", 1) or 0) + 1 if "Roberta" in architecture else 0
        max_positions = int(hf_config.max_position_embeddings) - offset
    return PoolingModelInfo(pooler=settings, tasks=tasks, encoder_only=encoder_only,
                            hidden_size=int(text.hidden_size), num_labels=num_labels, max_positions=max_positions)


def pooling_model_info(config: Any) -> PoolingModelInfo | None:
    """The engine's pooling settings (None when it generates). ``config`` is an ``InfercoreConfig``."""
    from infercore.config import DEMO_MODEL
    from infercore.models.model_folder import config_architecture, resolve_model_path

    if config.model.model == DEMO_MODEL and config.pooling.runner != "pooling":
        return None  # the demo model generates (and its folder is made only when an engine starts)
    # Whether the model pools, from config.json alone: a generating model's front end never loads
    # transformers' config code (and torch under it).
    if not wants_pooling(config.pooling, config_architecture(config.model) or ""):
        return None
    from infercore.models.hf_config import get_hf_config

    hf_config = get_hf_config(config.model)
    folder = resolve_model_path(config.model)
    return resolve_pooling(config.pooling, Path(folder), hf_config)


def configure_pooling(config: Any) -> None:
    """Adjust the engine config for a pooling model: bidirectional (encoder-only) models compute every
    prompt in one step (no chunked prefill) and reuse no cached prefix; a method that reads more than the
    last token skips the prefix cache (the hidden states of cached tokens are never computed)."""
    info = pooling_model_info(config)
    if info is None:
        return
    if info.encoder_only:
        config.scheduler.enable_chunked_prefill = False
        config.cache.enable_prefix_caching = False
        # Encoder attention reads the step's lengths on the host: steps run eagerly, never from a graph.
        config.model.enforce_eager = True
        if config.model.max_model_len is None and info.max_positions is not None:
            config.model.max_model_len = info.max_positions
    elif info.pooler.pooling_type.needs_every_token:
        config.cache.enable_prefix_caching = False
