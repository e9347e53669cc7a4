"""infercore_rocm."""
