"""Executors: how the workers that hold the model are driven."""
