"""Hook implementations of this plugin."""

from __future__ import annotations

INFERCORE_PLUGIN_API = 1
