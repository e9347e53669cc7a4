"""lm-eval's ``local-completions`` loglikelihood (a multiple-choice task from a local file) against the
server: every choice gets a non-zero, finite log-likelihood equal to offline ``LLM.generate``
prompt_logprobs of the same tokens."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from infercore import SamplingParams

QUESTIONS = [
    {"question": "The sky on a clear day is", "choices": ["blue", "green", "made of cheese"], "answer": 0},
    {"question": "Two plus two equals", "choices": ["four", "five"], "answer": 0},
]
TASK = "infercore_tiny_choice"


def _write_task(folder: Path) -> Path:
    data = folder / "questions.jsonl"
    data.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    (folder / f"{TASK}.yaml").write_text(
        f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\noutput_type: multiple_choice\ndoc_to_text: '{{question}}'\n"
        "doc_to_choice: '{{choices}}'\ndoc_to_target: '{{answer}}'\nmetric_list:\n  - metric: acc\n")
    return folder


def test_lm_eval_loglikelihoods_match_offline_prompt_logprobs(protocol_server, protocol_model, offline_llm,
                                                              tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    from lm_eval import simple_evaluate
    from lm_eval.models.openai_completions import LocalCompletionsAPI
    from lm_eval.tasks import TaskManager

    lm = LocalCompletionsAPI(base_url=protocol_server.url + "/v1/completions", model="tiny",
                             tokenizer=str(protocol_model), tokenizer_backend="huggingface", max_retries=1,
                             max_length=256)
    results = simple_evaluate(model=lm, tasks=[TASK], task_manager=TaskManager(include_path=str(_write_task(tmp_path))),
                              log_samples=True)
    samples = results["samples"][TASK]
    scored = [(arguments, resp[0]) for sample in samples
              for arguments, resp in zip(sample["arguments"], sample["resps"])]
    assert len(scored) == sum(len(q["choices"]) for q in QUESTIONS)
    for (context, continuation), (served, _) in scored:
        context_ids, continuation_ids = lm._encode_pair(context, continuation)
        [out] = offline_llm.generate([context_ids + continuation_ids], SamplingParams(max_tokens=1, prompt_logprobs=0),
                                     use_tqdm=False)
        positions = out.prompt_logprobs[len(context_ids):]
        expected = sum(position[token].logprob for token, position in zip(continuation_ids, positions))
        assert math.isfinite(served) and served != 0.0
        assert served == pytest.approx(expected, abs=1e-4), (context, continuation)
