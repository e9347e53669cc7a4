"""Picks each custom op's implementation for the current platform, once per plugin manager."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from infercore.platforms import current_platform
from infercore.plugins import get_plugin_manager
from infercore.plugins.manager import PluginManager

_cache: weakref.WeakKeyDictionary[PluginManager, dict[tuple[str, str], Callable[..., Any]]] = (
    weakref.WeakKeyDictionary()
)


def get_op(name: str) -> Callable[..., Any]:
    """The implementation of custom op ``name`` for the current platform.

    A registration whose metadata ``platform`` matches the current platform wins; otherwise the
    platform-independent reference is used. The choice is cached per plugin manager, so replacing
    the manager (``reset_plugin_manager``) makes the next call look again.
    """
    manager = get_plugin_manager()
    platform = current_platform(manager).name
    ops = _cache.setdefault(manager, {})
    key = (name, platform)
    if key not in ops:
        ops[key] = manager.registry("custom_op").load(name, platform)
    return ops[key]
