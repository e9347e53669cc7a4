"""The kit's tensor-parallel case: the example plugin's models (GPT-NeoX, which sizes its heads from
``ModelSpec.tp_size``, and GPT-2) give on two ranks the tokens they give on one; the loader gives a plugin
model plain tensors and its rank under tensor parallelism."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_kit import _summary, run_kit

from infercore.config import InfercoreConfig
from infercore.layers.tensor_parallel import get_tp_state, set_tp_state
from infercore.models.loader import load_model


@pytest.fixture(scope="module")
def neox_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infercore_acme.folder import build_gpt_neox_folder

    return build_gpt_neox_folder(tmp_path_factory.mktemp("gpt-neox"))


@pytest.mark.parametrize("model", ["neox", "gpt2"])
def test_kit_runs_the_plugin_model_on_two_ranks(model: str, neox_folder: Path, gpt2_folder: Path) -> None:
    folder = neox_folder if model == "neox" else gpt2_folder
    proc = run_kit("--infercore-platform", "acme", "--infercore-model", str(folder), "-k", "tensor_parallelism")
    assert proc.returncode == 0 and "1 passed" in proc.stdout, _summary(proc)


def test_a_plugin_model_gets_its_rank_and_plain_tensors(neox_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 of 2 (no process group is needed to build and load): the spec says so, the heads are halved,
    and ``load_weights`` receives ``torch.Tensor`` values it can compute with."""
    from infercore_acme.gpt_neox import GPTNeoXForCausalLM

    seen: list[tuple[str, type]] = []
    specs = []
    original_load, original_init = GPTNeoXForCausalLM.load_weights, GPTNeoXForCausalLM.__init__

    def recording_load(self, weights):
        def checked():
            for name, tensor in weights:
                seen.append((name, type(tensor)))
                yield name, tensor * 1.0  # arithmetic works on what the contract promises
        return original_load(self, checked())

    def recording_init(self, spec):
        specs.append(spec)
        original_init(self, spec)

    monkeypatch.setattr(GPTNeoXForCausalLM, "load_weights", recording_load)
    monkeypatch.setattr(GPTNeoXForCausalLM, "__init__", recording_init)
    previous = get_tp_state()
    set_tp_state(1, 2)
    try:
        model = load_model(InfercoreConfig.from_kwargs(model=str(neox_folder)), torch.device("cpu"), torch.float32)
    finally:
        set_tp_state(previous.rank, previous.size)
    assert (specs[0].tp_rank, specs[0].tp_size) == (1, 2)
    assert model.gpt_neox.layers[0].attention.attn.num_heads == 2
    assert seen and all(kind is torch.Tensor for _, kind in seen), {k for _, k in seen}
