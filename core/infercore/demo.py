"""The built-in demo model: a small random-weight Qwen3 that `infercore serve` runs with no model given.

It exists so the server can be tried with nothing downloaded; its weights are random, so it prints
gibberish. The folder is built once, deterministically, into the infercore cache folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from infercore.config import DEMO_MODEL

if TYPE_CHECKING:
    from infercore.config import InfercoreConfig

DEMO_FOLDER = "demo"
DEMO_NOTICE = ("serving the built-in demo model 'infercore-demo': a tiny model with random weights that "
               "prints gibberish; pass a model name or folder to serve a real one")
_DEMO_CONFIG = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=64, max_position_embeddings=2048)
_DEMO_VOCAB = 4096


def cache_dir() -> Path:
    """infercore's cache folder: $INFERCORE_CACHE_DIR, else $XDG_CACHE_HOME/infercore, else ~/.cache/infercore."""
    explicit = os.environ.get("INFERCORE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "infercore"


def ensure_demo_model() -> Path:
    """The demo model's folder, building it on first use (atomically, so concurrent starts are safe)."""
    from infercore.tiny_models import build_model_folder

    target = cache_dir() / DEMO_FOLDER
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".demo-", dir=target.parent))
    try:
        build_model_folder(staging, "Qwen3ForCausalLM", seed=0, tokenizer_kwargs={"vocab_size": _DEMO_VOCAB},
                           **_DEMO_CONFIG)
        try:
            staging.rename(target)
        except OSError:
            if not (target / "config.json").exists():  # not a lost race with another builder
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def resolve_demo_model(config: InfercoreConfig) -> None:
    """Point the config at the demo model's folder (building it on first use) when it asks for it."""
    if config.model.model == DEMO_MODEL:
        path = str(ensure_demo_model())
        if config.model.served_model_name is None:
            config.model.served_model_name = DEMO_MODEL
        config.model.model = path
