"""OutputProcessor: output kinds, n>1 aggregation, logprobs, errors, aborts, queues."""

from __future__ import annotations

import asyncio

import pytest
from frontend_fakes import processor_for, token_by_token

from infercore.frontend import output_processor as op_module
from infercore.frontend.output_processor import OutputProcessor, RequestOutputKind
from infercore.sampling_params import SamplingParams
from infercore.wire.messages import EngineCoreOutput, FinishReason, Logprobs

TEXTS = ["hello world 你好", "the city of Paris 😀", "tool call json"]


def run(tokenizer, kind, params, texts, request_id="r"):
    """Interleave the children's tokens step by step; return every RequestOutput."""
    processed = processor_for(tokenizer).process(request_id, "hi", params)
    proc = OutputProcessor(tokenizer)
    proc.add_request(processed, kind)
    streams = [token_by_token(req.request_id, tokenizer.encode(t))
               for req, t in zip(processed.engine_requests, texts)]
    outputs = []
    for step in range(max(len(s) for s in streams)):
        batch = [s[step] for s in streams if step < len(s)]
        outputs += proc.process_outputs(batch).request_outputs
    assert not proc.has_unfinished_requests() and proc.num_unfinished_requests == 0
    return outputs


def test_n3_cumulative_aggregates_children(tokenizer):
    outs = run(tokenizer, RequestOutputKind.CUMULATIVE, SamplingParams(n=3, seed=7, max_tokens=50), TEXTS)
    assert all(len(o.outputs) == 3 for o in outs)
    assert [o.finished for o in outs] == [False] * (len(outs) - 1) + [True]
    final = outs[-1]
    assert [c.index for c in final.outputs] == [0, 1, 2]
    assert [c.text for c in final.outputs] == TEXTS
    assert all(c.finish_reason == "length" for c in final.outputs)
    assert final.request_id == "r" and final.prompt == "hi"


def test_n3_delta_sends_only_changed_children(tokenizer):
    outs = run(tokenizer, RequestOutputKind.DELTA, SamplingParams(n=3, max_tokens=50), TEXTS)
    for i, text in enumerate(TEXTS):
        assert "".join(c.text for o in outs for c in o.outputs if c.index == i) == text
        ids = [t for o in outs for c in o.outputs if c.index == i for t in c.token_ids]
        assert ids == tokenizer.encode(text)
    last_step = outs[-1]
    assert last_step.finished and len(last_step.outputs) < 3


def test_final_only_gives_one_output(tokenizer):
    outs = run(tokenizer, RequestOutputKind.FINAL_ONLY, SamplingParams(n=3, max_tokens=50), TEXTS)
    assert len(outs) == 1 and outs[0].finished
    assert [c.text for c in outs[0].outputs] == TEXTS


def test_cumulative_grows_and_deltas_add_up_to_it(tokenizer):
    cumulative = run(tokenizer, RequestOutputKind.CUMULATIVE, SamplingParams(), TEXTS[1:2])
    deltas = run(tokenizer, RequestOutputKind.DELTA, SamplingParams(), TEXTS[1:2])
    texts = [o.outputs[0].text for o in cumulative]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))
    assert texts[-1] == "".join(o.outputs[0].text for o in deltas) == TEXTS[1]
    assert cumulative[-1].outputs[0].token_ids == tokenizer.encode(TEXTS[1])


def test_n_children_get_distinct_seeds(tokenizer):
    processed = processor_for(tokenizer).process("r", "hi", SamplingParams(n=3, seed=10))
    assert [r.request_id for r in processed.engine_requests] == ["0_r", "1_r", "2_r"]
    assert [r.sampling_params.seed for r in processed.engine_requests] == [10, 11, 12]
    assert all(r.parent_id == "r" and r.sampling_params.n == 1 for r in processed.engine_requests)


def test_error_finishes_one_request_only(tokenizer):
    proc = OutputProcessor(tokenizer)
    inputs = processor_for(tokenizer)
    proc.add_request(inputs.process("a", "hi", SamplingParams()))
    proc.add_request(inputs.process("b", "hi", SamplingParams()))
    result = proc.process_outputs([EngineCoreOutput("a", [], finish_reason=FinishReason.ERROR, error="grammar failed"),
                                   EngineCoreOutput("b", tokenizer.encode("ok"))])
    by_id = {o.request_id: o for o in result.request_outputs}
    assert by_id["a"].finished and by_id["a"].outputs[0].finish_reason == "error"
    assert by_id["a"].outputs[0].stop_reason == "grammar failed"
    assert not by_id["b"].finished and by_id["b"].outputs[0].text == "ok"
    assert proc.num_unfinished_requests == 1 and result.reqs_to_abort == []


def test_detokenizer_failure_fails_that_request_only(tokenizer, monkeypatch):
    class Broken:
        def step(self, token_id: int) -> str:
            raise RuntimeError("boom")

    proc = OutputProcessor(tokenizer)
    inputs = processor_for(tokenizer)
    proc.add_request(inputs.process("good", "hi", SamplingParams()))
    monkeypatch.setattr(op_module, "make_detokenizer", lambda *args: Broken())
    proc.add_request(inputs.process("bad", "hi", SamplingParams()))
    result = proc.process_outputs([EngineCoreOutput("bad", [5]), EngineCoreOutput("good", [5])])
    by_id = {o.request_id: o for o in result.request_outputs}
    assert by_id["bad"].outputs[0].finish_reason == "error" and result.reqs_to_abort == ["bad"]
    assert by_id["good"].outputs[0].finish_reason is None


def test_logprobs_are_converted(tokenizer):
    a, b = tokenizer.encode("a")[0], tokenizer.encode("b")[0]
    proc = OutputProcessor(tokenizer)
    proc.add_request(processor_for(tokenizer).process("r", "hi", SamplingParams(logprobs=2, prompt_logprobs=1)),
                     RequestOutputKind.DELTA)
    wire = Logprobs(token_ids=[[a, a, b], [b, a, b]], logprobs=[[-0.1, -0.1, -2.5], [-3.0, -0.2, -3.0]],
                    ranks=[1, 2])
    prompt_wire = Logprobs(token_ids=[[b, a]], logprobs=[[-4.0, -0.5]], ranks=[3])
    out = proc.process_outputs([EngineCoreOutput("r", [a, b], new_logprobs=wire, prompt_logprobs=prompt_wire)])
    ro = out.request_outputs[0]
    c = ro.outputs[0]
    assert c.text == "ab" and c.cumulative_logprob == pytest.approx(-3.1)
    assert list(c.logprobs[0]) == [a, b]
    assert c.logprobs[0][a].rank == 1 and c.logprobs[0][b].rank == 2 and c.logprobs[0][b].decoded_token == "b"
    assert c.logprobs[1][b].rank == 2 and c.logprobs[1][b].logprob == -3.0 and c.logprobs[1][a].rank == 1
    assert ro.prompt_logprobs[0] is None and ro.prompt_logprobs[1][b].rank == 3
    more = proc.process_outputs([EngineCoreOutput("r", [a], new_logprobs=Logprobs([[a]], [[-1.0]], [1]))])
    c2 = more.request_outputs[0].outputs[0]
    assert len(c2.logprobs) == 1 and c2.cumulative_logprob == pytest.approx(-4.1)
    assert more.request_outputs[0].prompt_logprobs == []


def test_detokenize_false_gives_token_ids_only(tokenizer):
    ids = tokenizer.encode("hello")
    proc = OutputProcessor(tokenizer)
    proc.add_request(processor_for(tokenizer).process("r", "hi", SamplingParams(detokenize=False)))
    c = proc.process_outputs(token_by_token("r", ids)).request_outputs[-1].outputs[0]
    assert c.text == "" and c.token_ids == ids


def test_without_tokenizer_outputs_are_token_ids(tokenizer):
    proc = OutputProcessor(None)
    proc.add_request(processor_for(tokenizer).process("r", [5, 6], SamplingParams(logprobs=0)))
    c = proc.process_outputs([EngineCoreOutput("r", [7], Logprobs([[7]], [[-1.0]], [4]))]).request_outputs[0].outputs[0]
    assert c.text == "" and c.token_ids == [7] and c.logprobs[0][7].decoded_token is None


def test_queue_receives_the_outputs(tokenizer):
    queue: asyncio.Queue = asyncio.Queue()
    proc = OutputProcessor(tokenizer)
    proc.add_request(processor_for(tokenizer).process("r", "hi", SamplingParams()), RequestOutputKind.DELTA, queue)
    result = proc.process_outputs(token_by_token("r", tokenizer.encode("hello world")))
    assert result.request_outputs == []
    items = [queue.get_nowait() for _ in range(queue.qsize())]
    assert "".join(i.outputs[0].text for i in items) == "hello world" and items[-1].finished


def test_abort_forgets_the_request(tokenizer):
    proc = OutputProcessor(tokenizer)
    proc.add_request(processor_for(tokenizer).process("r", "hi", SamplingParams(n=2)))
    assert proc.abort_request("r") == ["0_r", "1_r"]
    assert proc.process_outputs([EngineCoreOutput("0_r", [5])]).request_outputs == []
    assert not proc.has_unfinished_requests() and proc.abort_request("r") == []


def test_duplicate_request_id_is_refused(tokenizer):
    proc = OutputProcessor(tokenizer)
    processed = processor_for(tokenizer).process("r", "hi", SamplingParams())
    proc.add_request(processed)
    with pytest.raises(ValueError, match="already in use"):
        proc.add_request(processed)


def test_one_token_prompt_has_prompt_logprobs_of_none(tokenizer):
    token = tokenizer.encode("a")[0]
    proc = OutputProcessor(tokenizer)
    proc.add_request(processor_for(tokenizer).process("r", [token], SamplingParams(prompt_logprobs=1, max_tokens=1)))
    out = proc.process_outputs([EngineCoreOutput("r", [token], finish_reason=FinishReason.LENGTH)])
    assert out.request_outputs[0].prompt_logprobs == [None]
