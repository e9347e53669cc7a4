"""Gemma 3's two KV cache groups through the Triton backend (kernels through the interpreter): steps
padded to whole prefill/mixed graphs and to decode graphs (stand-ins replaying eagerly, since no device
graphs run here), with async scheduling and a prefix hit, give the tokens of the CPU backend's plain
steps. Each group's layers read their own block table and write their own slots."""

from __future__ import annotations

from pathlib import Path

import decode_graph_stand_in
import mixed_graph_stand_in
import pytest

from infercore import LLM, SamplingParams
from infercore.scheduler.hybrid_kv_cache_manager import HybridKVCacheManager
from infercore.tiny_models import build_model_folder
from infercore_cpu.platform import CpuPlatform

#: Two seats: the sliding group's pool (17 blocks) is smaller than the ids the global group hands out.
ENGINE = {"dtype": "float32", "max_model_len": 96, "num_gpu_blocks_override": 40, "max_num_seqs": 2,
          "cpu_threads": 1, "max_num_batched_tokens": 32, "block_size": 4}
GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
#: A 40-token prompt chunked over 32-token steps; the last prompt repeats the 17-token one's first 16
#: tokens (a prefix hit, run after the others: the sliding group still holds the hit's window).
PROMPTS = [{"prompt_token_ids": list(range(start, start + n))} for start, n in ((3, 40), (50, 9), (90, 17))]
REPEAT = [{"prompt_token_ids": [*range(90, 106), 5, 6]}]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_folder(tmp_path_factory.mktemp("gemma3"), "Gemma3ForCausalLM")


def _tokens(llm: LLM) -> list[list[int]]:
    first = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]
    return first + [o.outputs[0].token_ids for o in llm.generate(REPEAT, GREEDY, use_tqdm=False)]


def test_padded_graph_steps_of_both_groups_match_the_cpu_backend(folder: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    want = _tokens(LLM(model=str(folder), **ENGINE))

    monkeypatch.setattr(CpuPlatform, "select_attention_backend", lambda self, request: "triton")
    llm = LLM(model=str(folder), **ENGINE, async_scheduling=True)
    core = llm.llm_engine.engine_core
    kv = core.scheduler.kv_cache_manager
    assert isinstance(kv, HybridKVCacheManager) and [g.pool.num_blocks for g in kv.groups] == [40, 17]
    mixed = mixed_graph_stand_in.install(llm)
    decode = decode_graph_stand_in.install(llm)
    assert _tokens(llm) == want
    assert mixed.replayed and decode.replayed
    assert kv.prefix_cache_hits >= 16
