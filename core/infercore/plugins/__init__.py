"""The plugin system: hook specifications, the plugin manager and the registries it fills."""

from infercore.plugins.hookspecs import hookimpl, hookspec
from infercore.plugins.manager import PluginError, PluginInfo, get_plugin_manager, reset_plugin_manager
from infercore.plugins.registry import Registration, Registry

__all__ = [
    "PluginError",
    "PluginInfo",
    "Registration",
    "Registry",
    "get_plugin_manager",
    "hookimpl",
    "hookspec",
    "reset_plugin_manager",
]
