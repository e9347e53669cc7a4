"""4-bit AWQ and GPTQ checkpoints written here load through ``LLM(...)`` and run on the CPU exactly like
their dequantized float32 twins (the same weights, ``(q - zero) * scale``, saved unquantized).

W4A16 keeps activations unquantized, so the 4-bit model computes the twin's product: greedy tokens
identical for 32 steps and every logprob within 1e-4. Covered: AWQ's interleaved packing with
zero-points, GPTQ's packing with its stored ``zero - 1``, compressed-tensors ``pack-quantized``
(packed by that package), symmetric and asymmetric, group sizes
16/32/128 and -1, act-order (``desc_act`` with a permuted ``g_idx``), fused q/k/v and gate/up
projections of Qwen3 and Llama, a layer the checkpoint leaves unquantized, and bad checkpoints.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from int4_checkpoints import Int4Scheme, write_int4_pair
from safetensors.torch import load_file, save_file

from infercore import LLM, SamplingParams
from infercore.tiny_models import build_model_folder

PROMPTS = ["hello", "The engine cache block request server stream json tool call",
           "def add(a, b):\n    return a + b", " ".join(["the model of the token"] * 6)]
ENGINE = {"dtype": "float32", "max_model_len": 256, "num_gpu_blocks_override": 64, "max_num_seqs": 8,
          "cpu_threads": 1}
MAX_TOKENS = 32
BOUND = 1e-4

#: Checkpoints of the tiny Qwen3 (hidden 64: q 64 / kv 32 rows, intermediate 128).
SMALL = [Int4Scheme("awq", 32), Int4Scheme("awq", 16), Int4Scheme("gptq", 32, sym=True),
         Int4Scheme("gptq", 16, desc_act=True), Int4Scheme("gptq", 32, sym=True, desc_act=True),
         Int4Scheme("gptq", -1), Int4Scheme("compressed-tensors", 32, sym=True),
         Int4Scheme("compressed-tensors", 16), Int4Scheme("compressed-tensors", -1)]
#: Checkpoints of a Qwen3 and a Llama wide enough for group_size 128 (hidden 128, intermediate 256).
WIDE = [Int4Scheme("awq", 128), Int4Scheme("gptq", 128, desc_act=True)]


@pytest.fixture(scope="session")
def int4_pair(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Int4Scheme], tuple[Path, Path]]:
    """``int4_pair(architecture, scheme)`` → (4-bit checkpoint, dequantized twin), written once each."""
    models: dict[str, Path] = {}
    built: dict[tuple[str, str], tuple[Path, Path]] = {}

    def model(kind: str) -> Path:
        if kind not in models:
            arch, size = kind.split(":")
            wide = {"hidden_size": 128, "intermediate_size": 256, "head_dim": 32} if size == "wide" else {}
            if arch == "LlamaForCausalLM":
                wide.pop("head_dim", None)
            models[kind] = build_model_folder(tmp_path_factory.mktemp(kind.replace(":", "-")), arch, **wide)
        return models[kind]

    def make(kind: str, scheme: Int4Scheme) -> tuple[Path, Path]:
        if (kind, scheme.name) not in built:
            built[kind, scheme.name] = write_int4_pair(model(kind), tmp_path_factory.mktemp(scheme.name), scheme)
        return built[kind, scheme.name]

    return make


def _generate(folder: Path) -> list:
    llm = LLM(model=str(folder), **ENGINE)
    params = SamplingParams(temperature=0, ignore_eos=True, max_tokens=MAX_TOKENS, logprobs=3)
    return llm.generate(PROMPTS, params, use_tqdm=False)


def _assert_same_outputs(quantized: Path, twin: Path, what: str) -> None:
    ours, ref = _generate(quantized), _generate(twin)
    for a, b in zip(ours, ref):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids, f"{what}: prompt {a.prompt!r}"
        for step, (pa, pb) in enumerate(zip(a.outputs[0].logprobs, b.outputs[0].logprobs)):
            for token, lp in pa.items():
                assert abs(lp.logprob - pb[token].logprob) < BOUND, f"{what}: {a.prompt!r} step {step}"


@pytest.mark.parametrize("scheme", SMALL, ids=lambda s: s.name)
def test_int4_checkpoint_runs_like_its_dequantized_twin(int4_pair, scheme: Int4Scheme) -> None:
    quantized, twin = int4_pair("Qwen3ForCausalLM:small", scheme)
    _assert_same_outputs(quantized, twin, scheme.name)


@pytest.mark.parametrize("arch", ["Qwen3ForCausalLM", "LlamaForCausalLM"])
@pytest.mark.parametrize("scheme", WIDE, ids=lambda s: s.name)
def test_group_size_128_on_wider_models(int4_pair, arch: str, scheme: Int4Scheme) -> None:
    quantized, twin = int4_pair(f"{arch}:wide", scheme)
    _assert_same_outputs(quantized, twin, f"{arch} {scheme.name}")


def _edited_copy(src: Path, dst: Path, tensors: Callable[[dict], dict] | None = None,
                 config: Callable[[dict], dict] | None = None) -> Path:
    shutil.copytree(src, dst)
    if tensors is not None:
        path = dst / "model.safetensors"
        save_file(tensors(load_file(str(path))), str(path), metadata={"format": "pt"})
    if config is not None:
        path = dst / "config.json"
        path.write_text(json.dumps(config(json.loads(path.read_text()))))
    return dst


def _with_quantization(**changes: object) -> Callable[[dict], dict]:
    def edit(cfg: dict) -> dict:
        cfg["quantization_config"] = {**cfg["quantization_config"], **changes}
        return cfg

    return edit


def test_unsupported_bits_are_named(int4_pair, tmp_path: Path) -> None:
    quantized, _ = int4_pair("Qwen3ForCausalLM:small", SMALL[0])
    bad = _edited_copy(quantized, tmp_path / "bits", config=_with_quantization(bits=8))
    with pytest.raises(ValueError, match="AWQ checkpoints with bits=8 are not supported"):
        LLM(model=str(bad), **ENGINE)


def test_wrong_qweight_shape_is_named(int4_pair, tmp_path: Path) -> None:
    quantized, _ = int4_pair("Qwen3ForCausalLM:small", SMALL[2])
    name = "model.layers.0.mlp.down_proj.qweight"

    def truncate(tensors: dict) -> dict:
        tensors[name] = tensors[name][:, :-8].contiguous()
        return tensors

    bad = _edited_copy(quantized, tmp_path / "shape", tensors=truncate)
    with pytest.raises(ValueError, match=r"checkpoint tensor of shape \(16, 56\) does not fit parameter of shape"):
        LLM(model=str(bad), **ENGINE)


def test_group_size_that_does_not_divide_the_input_is_refused(int4_pair, tmp_path: Path) -> None:
    quantized, _ = int4_pair("Qwen3ForCausalLM:small", SMALL[0])
    bad = _edited_copy(quantized, tmp_path / "group", config=_with_quantization(group_size=48))
    with pytest.raises(ValueError, match="does not split into whole groups of 48"):
        LLM(model=str(bad), **ENGINE)


def test_other_awq_layouts_are_refused(int4_pair, tmp_path: Path) -> None:
    quantized, _ = int4_pair("Qwen3ForCausalLM:small", SMALL[0])
    bad = _edited_copy(quantized, tmp_path / "gemv", config=_with_quantization(version="gemv"))
    with pytest.raises(ValueError, match="AWQ version 'gemv' is not supported"):
        LLM(model=str(bad), **ENGINE)


def test_quantizing_an_unquantized_checkpoint_to_int4_is_refused(int4_pair) -> None:
    _, twin = int4_pair("Qwen3ForCausalLM:small", SMALL[0])
    with pytest.raises(ValueError, match="--quantization gptq needs a checkpoint saved in that format"):
        LLM(model=str(twin), quantization="gptq", **ENGINE)
