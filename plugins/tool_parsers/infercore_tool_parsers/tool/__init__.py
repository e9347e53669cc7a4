"""Tool-call formats, one per module."""
