"""IBM Granite 3.2: ``Here is my thought process: … Here is my response: …``."""

from __future__ import annotations

from infercore.plugin_api import MarkerReasoningParser


class GraniteReasoningParser(MarkerReasoningParser):
    """Reasoning between Granite's plain-text headings (``Here is`` or ``Here's``)."""

    start_markers = ("Here is my thought process:", "Here's my thought process:")
    end_markers = ("Here is my response:", "Here's my response:")
