"""Persistent step inputs: host staging arrays and the device buffers attention metadata views."""

from __future__ import annotations

import math

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
    """One set of host staging tensors with numpy views of them, and a host decode arena."""

    def __init__(self, sizes: dict[str, int], max_reqs: int, max_blocks: int, pin: bool, arena_bytes: int,
                 extra_groups: int) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        for name, dtype, kind in _FIELDS:
            self.tensors[name] = torch.zeros(sizes[kind], dtype=dtype, pin_memory=pin)
        self.tensors["block_table"] = torch.zeros((max_reqs, max_blocks), dtype=torch.int32, pin_memory=pin)
        # The slot mappings and block tables of the KV cache groups after the first (hybrid models); empty
        # (and never pinned) otherwise.
        pin_groups = pin and extra_groups > 0
        self.tensors["group_slot_mapping"] = torch.zeros((extra_groups, sizes["tokens"]), dtype=torch.long,
                                                         pin_memory=pin_groups)
        self.tensors["group_block_table"] = torch.zeros((extra_groups, max_reqs, max_blocks), dtype=torch.int32,
                                                        pin_memory=pin_groups)
        self.arrays = {name: t.numpy() for name, t in self.tensors.items()}
        self.arena = torch.zeros(arena_bytes, dtype=torch.uint8, pin_memory=pin)


#: The inputs of a pure-decode step that live in the decode arena, in arena order, with their dtypes.
_ARENA_FIELDS = {
    "input_ids": torch.long, "positions": torch.long, "slot_mapping": torch.long,
    "patch_dst": torch.long, "patch_src": torch.long,
    "query_start_loc": torch.int32, "seq_lens": torch.int32, "block_table": torch.int32,
}
_ALIGN = 256
#: An arena field's place: byte offset, bytes, shape.
_Place = tuple[int, int, tuple[int, ...]]


def _arena_layout(size: int, width: int) -> tuple[dict[str, _Place], int]:
    """Where every arena field lies for ``size`` decodes of block-table ``width``, and the bytes they span.
    The same (size, width) always gives the same layout, so a graph captured on one step's views reads
    every later step's."""
    layout: dict[str, _Place] = {}
    offset = 0
    for name, dtype in _ARENA_FIELDS.items():
        shape = (size + 1,) if name == "query_start_loc" else (size, width) if name == "block_table" else (size,)
        nbytes = math.prod(shape) * dtype.itemsize
        layout[name] = (offset, nbytes, shape)
        offset += -(-nbytes // _ALIGN) * _ALIGN
    return layout, offset


def _arena_views(arena: torch.Tensor, layout: dict[str, _Place]) -> dict[str, torch.Tensor]:
    return {name: arena[offset: offset + nbytes].view(_ARENA_FIELDS[name]).view(shape)
            for name, (offset, nbytes, shape) in layout.items()}


class StepBuffers:
    """Input ids, positions, slot mapping, query starts, sequence lengths and block table of a step.

    The host side is numpy arrays over (pinned, on GPUs) tensors the runner fills; ``upload``
    copies the used prefix to the device without blocking. Two host sets alternate (``swap``) so
    a step can be prepared while the previous step's copies are still queued. On a CPU device the
    host tensors *are* the device buffers and nothing is copied. Device buffers never move, so a
    captured graph that reads them sees each step's values.

    With ``kv_groups`` > 1 (a hybrid model, :mod:`infercore.kv_cache.groups`), ``group_slot_mapping[g - 1]``
    and ``group_block_table[g - 1]`` are group ``g``'s; ``slot_mapping`` and ``block_table`` are the first
    group's. They stay out of the decode arena and are copied beside it.
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
    group_slot_mapping: torch.Tensor
    group_slot_mapping_host: torch.Tensor
    np_group_slot_mapping: np.ndarray
    group_block_table: torch.Tensor
    group_block_table_host: torch.Tensor
    np_group_block_table: np.ndarray

    def __init__(self, max_tokens: int, max_reqs: int, max_blocks: int, device: torch.device, pin: bool,
                 separate: bool | None = None, kv_groups: int = 1) -> None:
        self.device = device
        #: Whether the host tensors are the device buffers (a CPU device; ``separate=True`` keeps them
        #: apart there too, as tests of the copies do).
        self.same = device.type == "cpu" if separate is None else not separate
        sizes = {"tokens": max_tokens, "reqs": max_reqs, "reqs+1": max_reqs + 1}
        arena_bytes = _arena_layout(max_reqs, max_blocks)[1]
        #: KV cache groups after the first.
        self.extra_groups = kv_groups - 1
        self._sets = [_HostSet(sizes, max_reqs, max_blocks, pin and not self.same, arena_bytes, self.extra_groups)]
        if not self.same:
            self._sets.append(_HostSet(sizes, max_reqs, max_blocks, pin, arena_bytes, self.extra_groups))
        first = self._sets[0].tensors
        self.device_tensors = first if self.same else {
            name: torch.zeros_like(t, device=device) for name, t in first.items()}
        self.device_arena = self._sets[0].arena if self.same else torch.zeros(arena_bytes, dtype=torch.uint8,
                                                                              device=device)
        self._active = 0
        #: (size, width) of the bound decode layout; None when the general buffers are bound.
        self.decode_shape: tuple[int, int] | None = None
        self._decode_bytes = 0
        self._pending_upload = False
        self._bindings: dict[tuple[int, tuple[int, int] | None], dict[str, object]] = {}
        self._bind()

    def _binding(self, shape: tuple[int, int] | None) -> dict[str, object]:
        """The attributes that bind host set ``self._active`` in the general layout (``shape`` None) or
        the decode layout of ``shape``; built once per (set, shape)."""
        key = (self._active, shape)
        binding = self._bindings.get(key)
        if binding is not None:
            return binding
        host = self._sets[self._active]
        binding = {}
        for name, tensor in self.device_tensors.items():
            binding[name] = tensor
            binding[f"{name}_host"] = host.tensors[name]
            binding[f"np_{name}"] = host.arrays[name]
        if shape is not None:
            layout, nbytes = _arena_layout(*shape)
            for name, view in _arena_views(self.device_arena, layout).items():
                binding[name] = view
            for name, view in _arena_views(host.arena, layout).items():
                binding[f"{name}_host"] = view
                binding[f"np_{name}"] = view.numpy()
            binding["_decode_bytes"] = nbytes
        if len(self._bindings) > 1024:  # eager decode steps of many (size, width) pairs
            self._bindings.clear()
        self._bindings[key] = binding
        return binding

    def _bind(self, shape: tuple[int, int] | None = None) -> None:
        self.__dict__.update(self._binding(shape))
        self.decode_shape = shape

    def bind_decode(self, size: int, width: int) -> None:
        """Lay out the next step as ``size`` one-token decodes reading ``width`` block-table columns, all
        of its inputs in one arena: ``upload`` then defers, and ``flush`` copies them in one transfer.
        A graph captured on a size's views reads each later step of that size."""
        if self.decode_shape != (size, width):
            self._bind((size, width))
        self._pending_upload = False

    def bind_general(self) -> None:
        """Lay out the next step in the general buffers (one copy per input, ``upload`` copies at once)."""
        if self.decode_shape is not None:
            self._bind(None)

    def swap(self) -> None:
        """Fill the other host set next (its previous copies have completed by then)."""
        if len(self._sets) == 2:
            self._active ^= 1
            self._bind(self.decode_shape)

    def pad_tokens(self, num_tokens: int, padded: int) -> None:
        """Make tokens ``num_tokens:padded`` padding: token 0 at position 0, written nowhere (slot -1)."""
        self.np_input_ids[num_tokens:padded] = 0
        self.np_positions[num_tokens:padded] = 0
        self.np_slot_mapping[num_tokens:padded] = -1
        self.np_group_slot_mapping[:, num_tokens:padded] = -1

    def pad_requests(self, num_tokens: int, num_reqs: int, padded: int) -> None:
        """Make requests ``num_reqs:padded`` query-less dummies: no query tokens, no context."""
        self.np_query_start_loc[num_reqs + 1: padded + 1] = num_tokens
        self.np_seq_lens[num_reqs:padded] = 0

    def pad(self, num_tokens: int, num_reqs: int, padded: int) -> None:
        """Make requests ``num_reqs:padded`` one-token dummies that write nowhere and read nothing."""
        if padded <= num_reqs:
            return
        self.pad_tokens(num_tokens, padded)
        self.np_query_start_loc[num_reqs + 1: padded + 1] = np.arange(num_tokens + 1, num_tokens + 1 + padded - num_reqs)
        self.np_seq_lens[num_reqs:padded] = 0
        self.np_block_table[num_reqs:padded] = 0
        self.np_group_block_table[:, num_reqs:padded] = 0

    def upload(self, num_tokens: int, num_reqs: int, width: int) -> None:
        """Copy the used part of every step input to the device without blocking (no-op on CPU). With a
        decode layout bound, the copy waits for ``flush``."""
        if self.same:
            return
        if self.extra_groups:
            self.group_slot_mapping[:, :num_tokens].copy_(self.group_slot_mapping_host[:, :num_tokens],
                                                          non_blocking=True)
            self.group_block_table[:, :num_reqs, :width].copy_(self.group_block_table_host[:, :num_reqs, :width],
                                                               non_blocking=True)
        if self.decode_shape is not None:
            self._pending_upload = True
            return
        for name, n in (("input_ids", num_tokens), ("positions", num_tokens), ("slot_mapping", num_tokens),
                        ("query_start_loc", num_reqs + 1), ("seq_lens", num_reqs)):
            self.device_tensors[name][:n].copy_(getattr(self, f"{name}_host")[:n], non_blocking=True)
        self.block_table[:num_reqs, :width].copy_(self.block_table_host[:num_reqs, :width], non_blocking=True)

    def flush(self) -> None:
        """Copy a bound decode layout's inputs (patch indices included) in one transfer."""
        if self.decode_shape is not None and not self.same and self._pending_upload:
            n = self._decode_bytes
            self.device_arena[:n].copy_(self._sets[self._active].arena[:n], non_blocking=True)
            self._pending_upload = False

    def to_device(self, name: str, n: int) -> torch.Tensor:
        """The first ``n`` entries of a small per-request input, on the device. In a decode layout the
        patch indices travel with ``flush``: fill them before it."""
        if not self.same and not (self.decode_shape is not None and name in ("patch_dst", "patch_src")):
            self.device_tensors[name][:n].copy_(getattr(self, f"{name}_host")[:n], non_blocking=True)
        return getattr(self, name)[:n]
