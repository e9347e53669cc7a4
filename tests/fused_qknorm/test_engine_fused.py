"""The engine on a tiny Qwen3 with the Triton backend (through the interpreter): q/k norm, rotary and the KV
cache write run as one kernel per layer, and the greedy tokens are those of the unfused path and of the CPU
backend."""

from __future__ import annotations

from pathlib import Path

import mixed_graph_stand_in
import pytest
import torch

from infercore import LLM, SamplingParams
from infercore.tiny_models import build_model_folder
from infercore_cpu.platform import CpuPlatform
from infercore_triton import backend as triton_backend

ENGINE = {"dtype": "float32", "max_model_len": 64, "num_gpu_blocks_override": 16, "max_num_seqs": 4,
          "cpu_threads": 1}
#: Two prompts sharing a prefix (so the second reads cache blocks the first wrote), and a short one.
PROMPTS = [[5, 17, 99, 3, 250, 41, 8, 77, 12, 6, 30, 2, 19, 64, 7, 11, 90],
           [5, 17, 99, 3, 250, 41, 8, 77, 12, 6, 30, 2, 19, 64, 7, 11, 33, 44], [101, 7, 9]]
GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_folder(tmp_path_factory.mktemp("qwen3"), "Qwen3ForCausalLM")


def _greedy(folder: Path) -> list[list[int]]:
    llm = LLM(model=str(folder), **ENGINE)
    return [o.outputs[0].token_ids for o in llm.generate([{"prompt_token_ids": p} for p in PROMPTS], GREEDY,
                                                         use_tqdm=False)]


@pytest.fixture
def triton_on_cpu(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The CPU platform picks the Triton backend; the returned list counts fused kernel launches."""
    launches: list[int] = []
    fused = triton_backend.qk_norm_rotary_write_kv

    def counting(*args: object, **kwargs: object) -> torch.Tensor:
        launches.append(1)
        return fused(*args, **kwargs)

    monkeypatch.setattr(CpuPlatform, "select_attention_backend", lambda self, request: "triton")
    monkeypatch.setattr(triton_backend, "qk_norm_rotary_write_kv", counting)
    return launches


def test_fused_path_gives_the_unfused_greedy_tokens(folder: Path, triton_on_cpu: list[int],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    fused = _greedy(folder)
    # 2 layers, at least one prefill step and 3 decode steps.
    assert len(triton_on_cpu) >= 2 * 4
    monkeypatch.setattr(triton_backend.TritonAttentionImpl, "fuses_qk_norm_rotary", False)
    launches = len(triton_on_cpu)
    unfused = _greedy(folder)
    assert len(triton_on_cpu) == launches
    assert fused == unfused
    monkeypatch.undo()
    assert _greedy(folder) == fused  # the CPU platform's own backend and ops


def test_steps_padded_for_mixed_graphs_give_the_same_tokens(folder: Path, triton_on_cpu: list[int],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompt steps padded to a graph's token count (padding rows: slot -1, no request) through the
    Triton kernels, which write and rotate every row they are given. With 12-token steps and prompts
    of 12, 11 and 13 tokens, the last chunk's step is short: its staging rows past its tokens held
    real slots of earlier steps, which padding must not overwrite.

    The Triton backend captures such steps whole, so their requests are padded too (query-less
    dummies) and attention runs its uniform launches, the ones a captured graph replays."""
    uniform: list[bool] = []
    prefill = triton_backend.prefill_attention

    def recording(*args: object, **kwargs: object) -> torch.Tensor:
        uniform.append(bool(kwargs.get("uniform_grid")))
        return prefill(*args, **kwargs)

    monkeypatch.setattr(triton_backend, "prefill_attention", recording)
    engine = {**ENGINE, "max_num_batched_tokens": 12}
    requests = [{"prompt_token_ids": list(range(start, start + n))} for start, n in ((10, 12), (40, 11), (70, 13))]
    want = [o.outputs[0].token_ids for o in LLM(model=str(folder), **engine).generate(requests, GREEDY,
                                                                                       use_tqdm=False)]
    llm = LLM(model=str(folder), **engine)
    stand_in = mixed_graph_stand_in.install(llm)
    got = [o.outputs[0].token_ids for o in llm.generate(requests, GREEDY, use_tqdm=False)]
    assert len(stand_in.replayed) >= 4 and got == want
    assert any(uniform) and not all(uniform)  # padded steps launched uniformly; the unpadded run did not
