"""The engine freezes what start-up built, so the cyclic collector skips it while serving."""

from __future__ import annotations

import gc

from infercore import SamplingParams


def test_start_up_freezes_its_objects(make_llm) -> None:
    gc.unfreeze()
    llm = make_llm()
    core = llm.llm_engine.engine_core
    try:
        assert gc.get_freeze_count() > 0
        out = llm.generate([{"prompt_token_ids": [1, 2, 3]}], SamplingParams(max_tokens=3), use_tqdm=False)
        assert len(out[0].outputs[0].token_ids) == 3
    finally:
        core.shutdown()
    assert gc.get_freeze_count() == 0
