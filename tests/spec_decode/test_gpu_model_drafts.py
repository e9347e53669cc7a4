"""On a GPU, with the draft's steps and catch-up replayed from captured graphs: the target as its own draft
accepts (nearly) every draft and the greedy tokens stay the plain run's; an EAGLE-3 head too. Skipped
without CUDA. bfloat16 steps of different shapes may round a near-tie differently, so the bounds leave
room for that and nothing else."""

from __future__ import annotations

import pytest
import torch
from test_engine_ngram import ALL_PROMPTS

from infercore import LLM, SamplingParams
from infercore.spec_decode.tiny_heads import build_eagle3_head_folder

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (captured draft graphs)")


def _run(folder, spec=None, dtype="bfloat16"):
    llm = LLM(model=str(folder), dtype=dtype, max_model_len=256, max_num_seqs=16, gpu_memory_utilization=0.3,
              **({"speculative_config": spec} if spec else {}))
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    out = [o.outputs[0].token_ids for o in llm.generate(ALL_PROMPTS, params, use_tqdm=False)]
    return out, llm.llm_engine.engine_core.scheduler.get_stats()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_self_draft_and_eagle3_from_graphs(tiny_model_factory, tmp_path, dtype) -> None:
    folder = tiny_model_factory("Qwen3ForCausalLM")
    ref, _ = _run(folder, dtype=dtype)
    got, stats = _run(folder, {"method": "draft_model", "model": str(folder), "num_speculative_tokens": 3}, dtype)
    same = sum(a == b for a, b in zip(got, ref, strict=True))
    print(f"\n{dtype} draft_model: {same}/{len(ref)} rows identical; accepted {stats.spec_num_accepted_tokens} "
          f"of {stats.spec_num_draft_tokens}")
    assert stats.spec_num_accepted_tokens >= 0.9 * stats.spec_num_draft_tokens > 0, stats
    assert same >= len(ref) - 1, (same, len(ref))
    head = build_eagle3_head_folder(tmp_path / "head", folder, draft_vocab_size=96)
    got, stats = _run(folder, {"method": "eagle3", "model": str(head), "num_speculative_tokens": 3}, dtype)
    print(f"{dtype} eagle3: {sum(a == b for a, b in zip(got, ref, strict=True))}/{len(ref)} rows identical")
    assert sum(a == b for a, b in zip(got, ref, strict=True)) >= len(ref) - 1
    assert stats.spec_num_draft_tokens > 0


def test_eagle3_verifying_steps_never_wait_for_the_device(tiny_model_factory, tmp_path, monkeypatch) -> None:
    """From the forward pass to the last draft, a verifying step queues everything (verification, the
    head's catch-up and its steps, the copy back) without one synchronizing call; the tokens stay the
    plain run's."""
    from infercore.worker.model_runner import ModelRunner

    folder = tiny_model_factory("Qwen3ForCausalLM")
    ref, _ = _run(folder, dtype="float32")
    original = ModelRunner._sample
    checked = []

    def sample(self, req_ids, layout, forward, grammar_bitmask, draft_next=True):
        if self.spec is None or not self.input_batch.num_drafts[layout.rows].any():
            return original(self, req_ids, layout, forward, grammar_bitmask, draft_next)
        torch.cuda.set_sync_debug_mode("error")
        try:
            pending = original(self, req_ids, layout, forward, grammar_bitmask, draft_next)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        checked.append(pending.verified.drafted)
        return pending

    monkeypatch.setattr(ModelRunner, "_sample", sample)
    head = build_eagle3_head_folder(tmp_path / "head", folder, draft_vocab_size=96)
    got, stats = _run(folder, {"method": "eagle3", "model": str(head), "num_speculative_tokens": 3}, "float32")
    assert got == ref
    assert len(checked) > 10 and all(checked), checked[:5]
