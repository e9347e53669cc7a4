"""infercore's ROCm platform."""
