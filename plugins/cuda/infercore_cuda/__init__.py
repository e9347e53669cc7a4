"""infercore's CUDA platform."""
