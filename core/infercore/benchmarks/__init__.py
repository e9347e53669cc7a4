"""Benchmarks: offline throughput and online serving."""
