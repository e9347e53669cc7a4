"""A request the engine refuses while being added leaves nothing behind in the offline engine."""

from __future__ import annotations

import pytest

from infercore import SamplingParams


def test_refused_sequence_takes_back_its_siblings_and_the_engine_goes_on(make_llm) -> None:
    llm = make_llm()
    engine = llm.llm_engine
    real_add = engine.engine_core.add_request
    calls = {"n": 0}

    def refuse_second(req):
        calls["n"] += 1
        if calls["n"] == 2:
            raise ValueError("request id in use")
        real_add(req)

    engine.engine_core.add_request = refuse_second
    params = SamplingParams(n=3, max_tokens=4, temperature=0.0, ignore_eos=True)
    with pytest.raises(ValueError, match="in use"):
        engine.add_request("r0", {"prompt_token_ids": [1, 2, 3]}, params)
    engine.engine_core.add_request = real_add
    # The sibling the engine took was aborted and the request forgotten: nothing is left to wait for.
    assert not engine.has_unfinished_requests()
    out = llm.generate([{"prompt_token_ids": [4, 5, 6]}], SamplingParams(max_tokens=4, temperature=0.0,
                                                                         ignore_eos=True), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 4
