"""Config-only folders for the speculative benchmarks: a draft model of a workload's shape and an EAGLE-3
head for a target workload's shape (weights from ``load_format="dummy"``, as the target's).

``python -m infercore.benchmarks.spec_folders OUT TARGET_WORKLOAD DRAFT_WORKLOAD`` writes
``OUT/draft`` and ``OUT/eagle3_head`` and prints their paths as JSON.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from infercore.benchmarks.workloads import WORKLOADS
from infercore.spec_decode.tiny_heads import build_eagle3_head_folder

#: The public EAGLE-3 heads' draft vocabulary (Llama 3.1 8B, Qwen3 8B).
HEAD_DRAFT_VOCAB = 32000
#: The proposers that read a model, and which of :func:`write_folders`' folders each reads.
MODEL_FOLDERS = {"eagle3": "eagle3", "draft_model": "draft"}


def write_folders(out: Path, target: str, draft: str) -> dict[str, str]:
    """``{"draft": folder, "eagle3": folder}`` for the ``target`` workload's shape."""
    draft_folder = WORKLOADS[draft].write_model_folder(out / "draft")
    with tempfile.TemporaryDirectory() as tmp:
        target_folder = WORKLOADS[target].write_model_folder(Path(tmp) / "target")
        head = build_eagle3_head_folder(out / "eagle3_head", target_folder, draft_vocab_size=HEAD_DRAFT_VOCAB,
                                        weights=False)
    return {"draft": str(draft_folder), "eagle3": str(head)}


def speculative_config(method: str, k: int, folders: dict[str, str]) -> dict[str, Any]:
    """``speculative_config`` of ``method`` with ``k`` drafts, reading its model from ``folders`` where it needs one."""
    spec: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
    if method in MODEL_FOLDERS:
        spec["model"] = folders[MODEL_FOLDERS[method]]
    return spec


if __name__ == "__main__":
    print(json.dumps(write_folders(Path(sys.argv[1]), sys.argv[2], sys.argv[3])))
