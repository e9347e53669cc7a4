"""infercore_cuda."""
