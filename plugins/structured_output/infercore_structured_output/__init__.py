"""infercore_structured_output."""
