"""infercore_xpu."""
