"""infercore_tool_parsers."""
