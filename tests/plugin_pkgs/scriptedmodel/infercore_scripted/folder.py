"""Model folders for the test-only scripted architecture."""

from __future__ import annotations

import json
from pathlib import Path

from infercore.plugin_api import build_model_folder


def build_scripted_folder(path: str | Path, text: str) -> Path:
    """A tiny Qwen3 folder whose model replies ``text`` (tokenized by the folder's tokenizer) to anything."""
    from transformers import AutoTokenizer

    path = build_model_folder(path, "Qwen3ForCausalLM")
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    config_path = path / "config.json"
    config = json.loads(config_path.read_text())
    config["architectures"] = ["ScriptedForCausalLM"]
    config["scripted_text"] = text
    config["scripted_token_ids"] = tokenizer.encode(text, add_special_tokens=False)
    config_path.write_text(json.dumps(config, indent=2))
    return path
