"""infercore_cpu."""
