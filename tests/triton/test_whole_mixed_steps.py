"""Steps with prompt tokens laid out for a whole-step graph: tokens and requests padded to the graph's
counts, prefills before decodes, and the Triton backend's uniform launches giving the tokens of unpadded
steps (kernels through the interpreter; no device graphs here, so a stand-in replays eagerly)."""

from __future__ import annotations

from pathlib import Path

import mixed_graph_stand_in
import pytest
import torch

from infercore import LLM, SamplingParams
from infercore.forward_context import get_forward_context
from infercore.tiny_models import build_model_folder
from infercore_cpu.platform import CpuPlatform

ENGINE = {"dtype": "float32", "max_model_len": 96, "num_gpu_blocks_override": 40, "max_num_seqs": 4,
          "cpu_threads": 1, "max_num_batched_tokens": 32}
GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
#: Prompts of 40, 9, 17 and 2 tokens: chunked over 32-token steps (the stand-in pads to multiples of 16,
#: within the step buffers) beside the others' decodes.
PROMPTS = [{"prompt_token_ids": list(range(start, start + n))} for start, n in ((3, 40), (50, 9), (90, 17), (7, 2))]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_folder(tmp_path_factory.mktemp("qwen3"), "Qwen3ForCausalLM")


def _tokens(llm: LLM) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]


def test_padded_whole_steps_match_unpadded_steps(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CpuPlatform, "select_attention_backend", lambda self, request: "triton")
    want = _tokens(LLM(model=str(folder), **ENGINE))

    llm = LLM(model=str(folder), **ENGINE)
    runner = llm.llm_engine.engine_core.executor.runner
    assert runner.mixed_graphs_whole  # the Triton backend captures such steps whole
    stand_in = mixed_graph_stand_in.install(llm)
    steps: list[dict[str, object]] = []
    replay = stand_in.replay

    def recording(size: int) -> torch.Tensor:
        meta = get_forward_context().attn_metadata
        n = meta.num_reqs
        starts = meta.query_start_loc.tolist()
        steps.append({"size": size, "uniform": meta.uniform, "num_reqs": n, "starts": starts,
                      "seq_lens": meta.seq_lens.tolist(), "slots": runner.buffers.slot_mapping[:size].tolist()})
        return replay(size)

    stand_in.replay = recording
    assert _tokens(llm) == want
    assert len(steps) >= 3
    mixed = 0
    for step in steps:
        size, n, starts, seq_lens = step["size"], step["num_reqs"], step["starts"], step["seq_lens"]
        assert step["uniform"] and n == min(size, ENGINE["max_num_seqs"])
        query_lens = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        real = sum(1 for q in query_lens if q > 0)
        tokens = starts[real]
        # Query-less padding requests after the real ones: they start at the step's end and read nothing.
        assert starts[real:] == [tokens] * (n + 1 - real) and seq_lens[real:] == [0] * (n - real)
        assert all(q > 0 for q in query_lens[:real])
        # Padding tokens write nowhere.
        assert step["slots"][tokens:] == [-1] * (size - tokens)
        # Prefills before decodes.
        kinds = [q == 1 for q in query_lens[:real]]
        assert kinds == sorted(kinds)
        mixed += any(kinds) and not all(kinds)
    assert mixed >= 1  # some step held both
