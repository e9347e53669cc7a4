"""The plugin guide states the plugin API version core speaks, and lists every minor release up to it."""

from __future__ import annotations

import re
from pathlib import Path

from infercore.plugin_api import API_VERSION

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def test_the_guide_states_the_current_version_and_every_minor() -> None:
    text = GUIDE.read_text()
    major, minor = API_VERSION
    stated = re.search(r"`infercore\.plugin_api\.API_VERSION` is `\(major, minor\)`, now `\((\d+), (\d+)\)`", text)
    assert stated is not None, "docs/plugins.md no longer states the API version"
    assert (int(stated[1]), int(stated[2])) == API_VERSION, "docs/plugins.md states an old plugin API version"
    policy = text[stated.start():]
    missing = [f"{major}.{m}" for m in range(1, minor + 1) if not re.search(rf"\b{major}\.{m}\b", policy)]
    assert not missing, f"docs/plugins.md's API policy does not say what {missing} added"
