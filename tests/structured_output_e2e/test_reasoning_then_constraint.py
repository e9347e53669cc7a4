"""With a reasoning parser, the constraint starts after the reasoning ends (offline engine)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from infercore import LLM, SamplingParams
from infercore.sampling_params import StructuredOutputsParams

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99},
                                            "ok": {"type": "boolean"}},
          "required": ["n", "ok"], "additionalProperties": False}
SEEDS = range(6)
ENGINE = {"dtype": "float32", "max_model_len": 512, "num_gpu_blocks_override": 256, "max_num_seqs": 8,
          "cpu_threads": 1}


def make_llm(model_dir: Path, **kwargs: object) -> LLM:
    return LLM(model=str(model_dir), **ENGINE, **kwargs)


def params(llm: LLM, seed: int) -> SamplingParams:
    # A nudge towards "</think>" so that the random model stops reasoning within a few tokens.
    end = llm.get_tokenizer().convert_tokens_to_ids("</think>")
    return SamplingParams(temperature=1.0, seed=seed, max_tokens=200, logit_bias={end: 4.0},
                          structured_outputs=StructuredOutputsParams(json=SCHEMA))


@pytest.fixture(scope="module")
def reasoning_llm(model_dir: Path) -> LLM:
    return make_llm(model_dir, reasoning_parser="qwen3")


def test_constraint_starts_after_reasoning(reasoning_llm: LLM) -> None:
    prompts = [f"question {seed}\n<think>" for seed in SEEDS]
    outputs = reasoning_llm.generate(prompts, [params(reasoning_llm, s) for s in SEEDS], use_tqdm=False)
    reasonings = []
    for out in outputs:
        text = out.outputs[0].text
        assert "</think>" in text, text
        reasoning, answer = text.split("</think>", 1)
        reasonings.append(reasoning)
        jsonschema.validate(json.loads(answer), SCHEMA)
    # The constraint was off while reasoning: the model wrote text a JSON grammar would refuse.
    assert any(r and not r.startswith("{") for r in reasonings), reasonings


def test_reasoning_closed_in_prompt_constrains_at_once(reasoning_llm: LLM) -> None:
    out = reasoning_llm.generate(["question\n<think>done</think>"], params(reasoning_llm, 0), use_tqdm=False)[0]
    jsonschema.validate(json.loads(out.outputs[0].text), SCHEMA)


def test_without_reasoning_parser_constraint_starts_at_once(model_dir: Path) -> None:
    llm = make_llm(model_dir)
    outputs = llm.generate([f"question {s}\n<think>" for s in SEEDS[:3]], [params(llm, s) for s in SEEDS[:3]],
                           use_tqdm=False)
    for out in outputs:
        jsonschema.validate(json.loads(out.outputs[0].text), SCHEMA)
