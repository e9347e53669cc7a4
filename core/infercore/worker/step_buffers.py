"""Persistent step inputs: host staging arrays and the device buffers attention metadata views."""

from __future__ import annotations

import numpy as np
import torch

#: (name, dtype, per-token?) of every step input; per-request ones are sized by max_reqs (+1 for
#: query starts). ``sample_index`` holds the flat rows whose logits are sampled; ``patch_dst`` /
#: ``patch_src`` place in-flight sampled tokens into ``input_ids`` under async scheduling.
_FIELDS = (
    ("input_ids", torch.long, "tokens"), ("positions", torch.long, "tokens"),
    ("slot_mapping", torch.long, "tokens"), ("query_start_loc", torch.int32, "reqs+1"),
    ("seq_lens", torch.int32, "reqs"), ("sample_index", torch.long, "reqs"),
    ("patch_dst", torch.long, "reqs"), ("patch_src", torch.long, "reqs"),
)


class _HostSet:
    """One set of host staging tensors with numpy views of them."""

    def __init__(self, sizes: dict[str, int], max_reqs: int, max_blocks: int, pin: bool) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        for name, dtype, kind in _FIELDS:
            self.tensors[name] = torch.zeros(sizes[kind], dtype=dtype, pin_memory=pin)
        self.tensors["block_table"] = torch.zeros((max_reqs, max_blocks), dtype=torch.int32, pin_memory=pin)
        self.arrays = {name: t.numpy() for name, t in self.tensors.items()}


class StepBuffers:
    """Input ids, positions, slot mapping, query starts, sequence lengths and block table of a step.

    The host side is numpy arrays over (pinned, on GPUs) tensors the runner fills; ``upload``
    copies the used prefix to the device without blocking. Two host sets alternate (``swap``) so
    a step can be prepared while the previous step's copies are still queued. On a CPU device the
    host tensors *are* the device buffers and nothing is copied. Device buffers never move, so a
    captured graph that reads them sees each step's values.
    """

    input_ids: torch.Tensor
    input_ids_host: torch.Tensor
    np_input_ids: np.ndarray
    positions: torch.Tensor
    positions_host: torch.Tensor
    np_positions: np.ndarray
    slot_mapping: torch.Tensor
    slot_mapping_host: torch.Tensor
    np_slot_mapping: np.ndarray
    query_start_loc: torch.Tensor
    query_start_loc_host: torch.Tensor
    np_query_start_loc: np.ndarray
    seq_lens: torch.Tensor
    seq_lens_host: torch.Tensor
    np_seq_lens: np.ndarray
    sample_index: torch.Tensor
    sample_index_host: torch.Tensor
    np_sample_index: np.ndarray
    patch_dst: torch.Tensor
    patch_dst_host: torch.Tensor
    np_patch_dst: np.ndarray
    patch_src: torch.Tensor
    patch_src_host: torch.Tensor
    np_patch_src: np.ndarray
    block_table: torch.Tensor
    block_table_host: torch.Tensor
    np_block_table: np.ndarray

    def __init__(self, max_tokens: int, max_reqs: int, max_blocks: int, device: torch.device, pin: bool) -> None:
        self.device = device
        self.same = device.type == "cpu"
        sizes = {"tokens": max_tokens, "reqs": max_reqs, "reqs+1": max_reqs + 1}
        self._sets = [_HostSet(sizes, max_reqs, max_blocks, pin and not self.same)]
        if not self.same:
            self._sets.append(_HostSet(sizes, max_reqs, max_blocks, pin))
        first = self._sets[0].tensors
        self.device_tensors = first if self.same else {
            name: torch.zeros_like(t, device=device) for name, t in first.items()}
        self._active = 0
        self._bind()

    def _bind(self) -> None:
        host = self._sets[self._active]
        for name, tensor in self.device_tensors.items():
            setattr(self, name, tensor)
            setattr(self, f"{name}_host", host.tensors[name])
            setattr(self, f"np_{name}", host.arrays[name])

    def swap(self) -> None:
        """Fill the other host set next (its previous copies have completed by then)."""
        if len(self._sets) == 2:
            self._active ^= 1
            self._bind()

    def pad_tokens(self, num_tokens: int, padded: int) -> None:
        """Make tokens ``num_tokens:padded`` padding: token 0 at position 0, written nowhere (slot -1)."""
        self.np_input_ids[num_tokens:padded] = 0
        self.np_positions[num_tokens:padded] = 0
        self.np_slot_mapping[num_tokens:padded] = -1

    def pad(self, num_tokens: int, num_reqs: int, padded: int) -> None:
        """Make requests ``num_reqs:padded`` one-token dummies that write nowhere and read nothing."""
        if padded <= num_reqs:
            return
        self.pad_tokens(num_tokens, padded)
        self.np_query_start_loc[num_reqs + 1: padded + 1] = np.arange(num_tokens + 1, num_tokens + 1 + padded - num_reqs)
        self.np_seq_lens[num_reqs:padded] = 0
        self.np_block_table[num_reqs:padded] = 0

    def upload(self, num_tokens: int, num_reqs: int, width: int) -> None:
        """Copy the used part of every step input to the device (no-op on CPU)."""
        if self.same:
            return
        for name, n in (("input_ids", num_tokens), ("positions", num_tokens), ("slot_mapping", num_tokens),
                        ("query_start_loc", num_reqs + 1), ("seq_lens", num_reqs)):
            self.device_tensors[name][:n].copy_(getattr(self, f"{name}_host")[:n], non_blocking=True)
        self.block_table[:num_reqs, :width].copy_(self.block_table_host[:num_reqs, :width], non_blocking=True)

    def to_device(self, name: str, n: int) -> torch.Tensor:
        """The first ``n`` entries of a small per-request input, on the device."""
        if not self.same:
            self.device_tensors[name][:n].copy_(getattr(self, f"{name}_host")[:n], non_blocking=True)
        return self.device_tensors[name][:n]
