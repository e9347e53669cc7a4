"""infercore_triton."""
