"""The engine over an fp8 cache with the Triton backend (kernels through the interpreter) and an fp8 decode table
(INFERCORE_DECODE_FP8_TABLE) naming a setting of its own: every decode launch takes the table's setting, and greedy
decoding gives the built-in setting's tokens (the same attention, summed over 32-token tiles rather than 128).
The table is in the form sweeps wrote before the FP8-dot and V-as-words variants were removed: their fields,
present and off, are dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import infercore_triton.backend as triton_backend
from infercore import LLM, SamplingParams
from infercore.tiny_models import build_model_folder
from infercore_cpu.platform import CpuPlatform
from infercore_triton import decode_fp8_table
from infercore_triton.decode_attention import DecodeConfig

ENGINE = {"dtype": "float32", "max_model_len": 96, "num_gpu_blocks_override": 40, "max_num_seqs": 4,
          "cpu_threads": 1, "max_num_batched_tokens": 32, "kv_cache_dtype": "fp8"}
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
PROMPTS = [{"prompt_token_ids": list(range(start, start + n))} for start, n in ((3, 40), (50, 9), (90, 17), (7, 2))]


def test_the_table_reaches_every_decode_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = build_model_folder(tmp_path / "qwen3", "Qwen3ForCausalLM", head_dim=32)
    monkeypatch.setattr(CpuPlatform, "select_attention_backend", lambda self, request: "triton")
    configs: list[DecodeConfig] = []
    launch = triton_backend.decode_attention

    def recording(*args: object, **kwargs: object) -> object:
        configs.append(kwargs["config"])
        return launch(*args, **kwargs)

    monkeypatch.setattr(triton_backend, "decode_attention", recording)

    def tokens() -> list[list[int]]:
        outs = LLM(model=str(folder), **ENGINE).generate(PROMPTS, GREEDY, use_tqdm=False)
        return [o.outputs[0].token_ids for o in outs]

    monkeypatch.delenv(decode_fp8_table.TABLE_ENV, raising=False)
    built_in = tokens()
    setting = DecodeConfig(block_n=32, num_warps=2, num_stages=2)
    assert configs and setting not in configs
    table = tmp_path / "table.json"
    written = decode_fp8_table.Fp8DecodeTable(setting, programs_per_sm=4).to_json()
    # As a sweep wrote it before the FP8-dot and V-as-words variants were removed: their fields, off.
    written["config"].update(fp8_qk_dot=False, fp8_pv_dot=False, fp8_v_words=False)
    table.write_text(json.dumps(written))
    monkeypatch.setenv(decode_fp8_table.TABLE_ENV, str(table))
    configs.clear()
    with_table = tokens()
    assert configs and all(c == setting for c in configs)
    assert with_table == built_in
