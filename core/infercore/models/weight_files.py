"""Reads checkpoint tensors from safetensors files (single or sharded) or PyTorch ``.bin`` files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import torch

from infercore.layers.checkpoint_slice import CheckpointSlice
from infercore.layers.tensor_parallel import get_tp_state

SAFETENSORS_INDEX = "model.safetensors.index.json"
PT_INDEX = "pytorch_model.bin.index.json"


def _indexed_or_globbed(folder: Path, index_name: str, pattern: str) -> list[Path]:
    index = folder / index_name
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / s for s in shards]
    return sorted(folder.glob(pattern))


def _safetensors_tensors(files: list[Path], lazy: bool) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import safe_open

    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                # A lazy slice is read when used, after the rank's weight loader narrowed it to its shard.
                yield name, (CheckpointSlice(f.get_slice(name)) if lazy else f.get_tensor(name))  # type: ignore[misc]


def _pt_tensors(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    for file in files:
        yield from torch.load(str(file), map_location="cpu", weights_only=True).items()


def iterate_weights(folder: Path, load_format: str = "auto",
                    lazy: bool | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Every (name, tensor) of the checkpoint in ``folder``. ``auto`` prefers safetensors and falls
    back to ``.bin``; ``safetensors`` and ``pt`` insist on that format.

    With ``lazy`` (default: when this process is one rank of a tensor-parallel group) safetensors
    tensors arrive as :class:`CheckpointSlice`: each rank reads only the shard its layers narrow to.
    """
    if lazy is None:
        lazy = get_tp_state().size > 1
    if load_format in ("auto", "safetensors"):
        files = _indexed_or_globbed(folder, SAFETENSORS_INDEX, "*.safetensors")
        if files:
            return _safetensors_tensors(files, lazy)
        if load_format == "safetensors":
            raise FileNotFoundError(f"no .safetensors weights in {folder}; use load_format='pt' for .bin "
                                    "checkpoints or 'dummy' for random weights")
    files = _indexed_or_globbed(folder, PT_INDEX, "*.bin")
    if not files:
        raise FileNotFoundError(f"no weights (.safetensors or .bin) in {folder}; download the model's weights "
                                "or use load_format='dummy' for random weights")
    return _pt_tensors(files)
