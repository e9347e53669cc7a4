"""A grammar that raises while masking or accepting tokens fails its own request only; the requests
sharing its steps finish whole and the engine goes on."""

from __future__ import annotations

import pytest

from infercore import SamplingParams
from infercore.sampling_params import StructuredOutputsParams

PLAIN = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
CONSTRAINED = SamplingParams(temperature=0, max_tokens=12,
                             structured_outputs=StructuredOutputsParams(choice=["alpha beta gamma", "delta"]))


class InjectedFault(RuntimeError):
    """The error the patched grammar raises."""


def _break(manager, method: str, victim: str) -> None:
    """Make ``manager.method`` raise whenever it is asked about the victim request while it holds a grammar."""
    real = getattr(manager, method)

    def broken(request_ids, *args):
        ids = [request_ids] if isinstance(request_ids, str) else request_ids
        if victim in ids and manager.has_grammar(victim):
            raise InjectedFault("the grammar fell over")
        return real(request_ids, *args)

    setattr(manager, method, broken)


@pytest.mark.parametrize("method", ["grammar_bitmask", "accept_tokens"])
def test_a_raising_grammar_fails_only_its_request(make_llm, method) -> None:
    llm = make_llm()
    engine = llm.llm_engine
    core = engine.engine_core
    reference = [o.outputs[0].token_ids for o in llm.generate(["hello", "the weather"], PLAIN, use_tqdm=False)]
    engine.add_request("ok-choice", "pick one", CONSTRAINED)  # builds the manager
    while engine.has_unfinished_requests():
        engine.step()
    _break(core.grammars.manager, method, "victim")
    engine.add_request("a", "hello", PLAIN)
    engine.add_request("victim", "pick one", CONSTRAINED)
    engine.add_request("b", "the weather", PLAIN)
    engine.add_request("choice", "pick another", CONSTRAINED)
    final = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                final[out.request_id] = out.outputs[0]
    assert final["victim"].finish_reason == "error"
    assert "InjectedFault" in final["victim"].stop_reason and "Traceback" not in final["victim"].stop_reason
    assert [final["a"].token_ids, final["b"].token_ids] == reference
    assert [final[r].finish_reason for r in ("a", "b")] == ["length", "length"]
    assert final["choice"].finish_reason == "stop" and final["choice"].text in ("alpha beta gamma", "delta")
    assert core.grammars.manager.num_requests == 0
    kv = core.scheduler.kv_cache_manager
    assert not core.scheduler.requests and kv.num_free_blocks == kv.num_usable_blocks
