"""Portable Triton kernels for infercore: paged attention, KV write, norms, rotary, activation."""
