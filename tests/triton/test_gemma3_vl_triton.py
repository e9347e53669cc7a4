"""Gemma 3 with images through the Triton backend (kernels through the interpreter): its prefill kernel honours
the image spans' visibility bounds on steps padded as whole prefill/mixed graphs and on decode-graph stand-ins,
with async scheduling and chunked prefill, giving HF's tokens and logprobs."""

from __future__ import annotations

from pathlib import Path

import decode_graph_stand_in
import mixed_graph_stand_in
import pytest
from gemma3_vl.gemma3_vl_oracle import MAX_NEW_TOKENS, Gemma3Oracle
from multimodal.mm_images import random_image

from infercore import LLM, SamplingParams
from infercore_cpu.platform import CpuPlatform

pytest.importorskip("PIL")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infercore.tiny_vision_models import build_gemma3_vl_folder

    return build_gemma3_vl_folder(tmp_path_factory.mktemp("gemma3_vl_triton"))


def test_gemma3_images_through_triton_match_hf(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CpuPlatform, "select_attention_backend", lambda self, request: "triton")
    llm = LLM(model=str(folder), dtype="float32", max_model_len=96, max_num_batched_tokens=40, block_size=4,
              num_gpu_blocks_override=60, cpu_threads=1, async_scheduling=True)
    assert llm.llm_engine.engine_core.executor.worker.runner.backend.name == "triton"
    mixed = mixed_graph_stand_in.install(llm)
    decode_graph_stand_in.install(llm)
    images = [random_image(40, 50, seed=1), random_image(33, 21, seed=2)]
    prompts = [{"prompt": "<start_of_image>what is in the picture", "multi_modal_data": {"image": images[:1]}},
               {"prompt": "the engine <start_of_image> and <start_of_image> compare", "multi_modal_data":
                {"image": images}}]
    params = SamplingParams(temperature=0, max_tokens=MAX_NEW_TOKENS, min_tokens=MAX_NEW_TOKENS, logprobs=3)
    outs = llm.generate(prompts, params, use_tqdm=False)
    assert mixed.replayed, "no step ran as a padded whole graph"
    oracle = Gemma3Oracle(folder)
    oracle.check(outs[0], images[:1], "one image")
    oracle.check(outs[1], images, "two images")
