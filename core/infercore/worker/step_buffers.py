"""Persistent step inputs: host staging arrays and the device buffers attention metadata views."""

from __future__ import annotations

import numpy as np
import torch


class StepBuffers:
    """Input ids, positions, slot mapping, query starts, sequence lengths and block table of a step.

    The host side is numpy views of (pinned, on GPUs) tensors the runner fills; ``upload`` copies
    the used prefix to the device without blocking. On a CPU device the host tensors *are* the
    device buffers and nothing is copied. Device buffers never move, so a captured graph that
    reads them sees each step's values.
    """

    def __init__(self, max_tokens: int, max_reqs: int, max_blocks: int, device: torch.device, pin: bool) -> None:
        self.device = device
        self.same = device.type == "cpu"

        def pair(shape: tuple[int, ...] | int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
            host = torch.zeros(shape, dtype=dtype, pin_memory=pin and not self.same)
            return host, (host if self.same else torch.zeros(shape, dtype=dtype, device=device))

        self.input_ids_host, self.input_ids = pair(max_tokens, torch.long)
        self.positions_host, self.positions = pair(max_tokens, torch.long)
        self.slot_mapping_host, self.slot_mapping = pair(max_tokens, torch.long)
        self.query_start_loc_host, self.query_start_loc = pair(max_reqs + 1, torch.int32)
        self.seq_lens_host, self.seq_lens = pair(max_reqs, torch.int32)
        self.block_table_host, self.block_table = pair((max_reqs, max_blocks), torch.int32)
        self.np_input_ids = self.input_ids_host.numpy()
        self.np_positions = self.positions_host.numpy()
        self.np_slot_mapping = self.slot_mapping_host.numpy()
        self.np_query_start_loc = self.query_start_loc_host.numpy()
        self.np_seq_lens = self.seq_lens_host.numpy()
        self.np_block_table = self.block_table_host.numpy()

    def pad(self, num_tokens: int, num_reqs: int, padded: int) -> None:
        """Make requests ``num_reqs:padded`` one-token dummies that write nowhere and read nothing."""
        if padded <= num_reqs:
            return
        self.np_input_ids[num_tokens:padded] = 0
        self.np_positions[num_tokens:padded] = 0
        self.np_slot_mapping[num_tokens:padded] = -1
        self.np_query_start_loc[num_reqs + 1: padded + 1] = np.arange(num_tokens + 1, num_tokens + 1 + padded - num_reqs)
        self.np_seq_lens[num_reqs:padded] = 0
        self.np_block_table[num_reqs:padded] = 0

    def upload(self, num_tokens: int, num_reqs: int, width: int) -> None:
        """Copy the used part of every host array to the device (no-op on CPU)."""
        if self.same:
            return
        for host, dev, n in ((self.input_ids_host, self.input_ids, num_tokens),
                             (self.positions_host, self.positions, num_tokens),
                             (self.slot_mapping_host, self.slot_mapping, num_tokens),
                             (self.query_start_loc_host, self.query_start_loc, num_reqs + 1),
                             (self.seq_lens_host, self.seq_lens, num_reqs)):
            dev[:n].copy_(host[:n], non_blocking=True)
        self.block_table[:num_reqs, :width].copy_(self.block_table_host[:num_reqs, :width], non_blocking=True)
