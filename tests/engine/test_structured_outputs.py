"""Constrained and unconstrained requests share batches; a bad constraint fails only its request."""

from __future__ import annotations

import json

import jsonschema
from engine_cases import GREEDY_32, PROMPTS, generate_tokens, run_to_completion

from infercore import SamplingParams
from infercore.sampling_params import StructuredOutputsParams

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Tokyo", "London"]},
        "days": {"type": "integer", "minimum": 0, "maximum": 99},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["sun", "rain"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["city", "days", "ok"],
    "additionalProperties": False,
}


def json_params(schema: object) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=150, structured_outputs=StructuredOutputsParams(json=schema))


def test_constrained_and_free_requests_in_one_batch(make_llm) -> None:
    llm = make_llm()
    alone = generate_tokens(llm, [PROMPTS[1], PROMPTS[4]])
    outputs = llm.generate([PROMPTS[0], PROMPTS[1], PROMPTS[3], PROMPTS[4]],
                           [json_params(SCHEMA), GREEDY_32, json_params(SCHEMA), GREEDY_32], use_tqdm=False)
    assert [outputs[1].outputs[0].token_ids, outputs[3].outputs[0].token_ids] == alone
    for out in (outputs[0], outputs[2]):
        completion = out.outputs[0]
        assert completion.finish_reason == "stop", completion.text
        jsonschema.validate(json.loads(completion.text), SCHEMA)
    # Unconstrained, the random model's text is not JSON at all.
    free = llm.generate([PROMPTS[0]], GREEDY_32, use_tqdm=False)[0].outputs[0].text
    assert not free.lstrip().startswith("{")


def test_invalid_schema_fails_only_its_request(make_llm) -> None:
    llm = make_llm()
    kv = llm.llm_engine.engine_core.scheduler.kv_cache_manager
    free_at_start = kv.num_free_blocks
    bad = json_params({"type": "object", "properties": {"a": {"type": "nonsense"}}})
    outputs = llm.generate([PROMPTS[0], PROMPTS[1], PROMPTS[2]], [GREEDY_32, bad, json_params(SCHEMA)],
                           use_tqdm=False)
    failed = outputs[1].outputs[0]
    assert failed.finish_reason == "error" and failed.token_ids == []
    assert outputs[0].outputs[0].token_ids == generate_tokens(llm, [PROMPTS[0]])[0]
    jsonschema.validate(json.loads(outputs[2].outputs[0].text), SCHEMA)
    assert kv.num_free_blocks == free_at_start
    assert not llm.llm_engine.has_unfinished_requests()


def test_abort_while_grammar_compiles(make_llm) -> None:
    llm = make_llm()
    engine = llm.llm_engine
    engine.add_request("constrained", PROMPTS[0], json_params(SCHEMA))
    engine.add_request("free", PROMPTS[1], GREEDY_32)
    engine.abort_request(["constrained"])
    outputs = run_to_completion(engine)
    assert "constrained" not in outputs
    assert outputs["free"][-1].outputs[0].token_ids == generate_tokens(llm, [PROMPTS[1]])[0]
    assert not engine.engine_core.grammars.pending
    assert not engine.engine_core.grammars.manager.has_grammar("constrained")
