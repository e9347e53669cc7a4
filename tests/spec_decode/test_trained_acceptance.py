"""On tiny models trained on a synthetic language with structure (``trained_language.py``: arithmetic
sequences and repeated spans), the n-gram proposer and a draft model (a smaller model trained on the same
language) accept more than half of their drafts, and the output is still the target's greedy output.

Measured (400 AdamW steps each, greedy, 16 prompts × 30 tokens, k = 3): n-gram 0.80, draft model 0.66.
Training takes about 1.5 minutes on 2 busy cores, so the models are kept in a cache folder keyed by the
training code (``INFERCORE_TEST_CACHE``, default ``~/.cache/infercore-tests``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from engine_cases import ENGINE_DEFAULTS
from trained_language import prompts, train_model

from infercore import LLM, SamplingParams

STEPS = 400
K = 3


def _trained_folders() -> tuple[Path, Path]:
    source = (Path(__file__).parent / "trained_language.py").read_bytes()
    key = hashlib.sha256(source + str(STEPS).encode()).hexdigest()[:16]
    root = Path(os.environ.get("INFERCORE_TEST_CACHE", Path.home() / ".cache" / "infercore-tests"))
    folder = root / f"trained-language-{key}"
    if not (folder / "draft" / "config.json").exists():
        with tempfile.TemporaryDirectory() as tmp:
            train_model(Path(tmp) / "target", hidden=64, layers=2, steps=STEPS, seed=0)
            train_model(Path(tmp) / "draft", hidden=32, layers=1, steps=STEPS, seed=0)
            folder.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=folder.parent))
            shutil.copytree(tmp, staging, dirs_exist_ok=True)
            staging.rename(folder) if not folder.exists() else shutil.rmtree(staging)
    return folder / "target", folder / "draft"


@pytest.mark.heavy
def test_ngram_and_draft_model_accept_most_drafts_on_a_trained_model() -> None:
    target, draft = _trained_folders()
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    requests = [{"prompt_token_ids": p} for p in prompts(16)]
    args = {**ENGINE_DEFAULTS, "model": str(target)}
    ref = [o.outputs[0].token_ids for o in LLM(**args).generate(requests, params, use_tqdm=False)]
    rates = {}
    for config in ({"method": "ngram", "num_speculative_tokens": K},
                   {"method": "draft_model", "model": str(draft), "num_speculative_tokens": K}):
        llm = LLM(**args, speculative_config=config)
        got = [o.outputs[0].token_ids for o in llm.generate(requests, params, use_tqdm=False)]
        assert got == ref, config["method"]
        stats = llm.llm_engine.engine_core.scheduler.get_stats()
        rates[config["method"]] = stats.spec_num_accepted_tokens / stats.spec_num_draft_tokens
    print("acceptance on the trained language:", {m: round(r, 3) for m, r in rates.items()})
    assert rates["ngram"] > 0.5 and rates["draft_model"] > 0.5, rates
