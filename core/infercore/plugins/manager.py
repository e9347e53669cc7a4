"""Finds plugins through entry points, checks them, and fills the registries from their hooks."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import importlib_metadata
import pluggy

from infercore.plugins import hookspecs
from infercore.plugins.registry import Registration, Registry
from infercore.version import api_version_problem

ENTRY_POINT_GROUP = "infercore.plugins"

#: Registry kinds and the hook that fills each.
KINDS: dict[str, str] = {
    "platform": "register_platforms",
    "attention_backend": "register_attention_backends",
    "model": "register_models",
    "custom_op": "register_custom_ops",
    "tool_parser": "register_tool_parsers",
    "reasoning_parser": "register_reasoning_parsers",
    "structured_output_backend": "register_structured_output_backends",
    "executor": "register_executors",
    "quantization_method": "register_quantization_methods",
    "speculative_method": "register_speculative_methods",
}


class PluginError(RuntimeError):
    """A plugin could not be loaded or used; the message names it, its distribution and version."""


@dataclass
class PluginInfo:
    """What is known of one loaded plugin."""

    name: str
    distribution: str
    version: str
    module: str
    hooks: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "module": self.module, "hooks": self.hooks}


@dataclass(frozen=True)
class BrokenPlugin:
    """A plugin that failed to load, and why."""

    name: str
    distribution: str
    version: str
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "broken": True, "error": self.error}


def _env_list(var: str) -> set[str] | None:
    raw = os.environ.get(var)
    if raw is None or not raw.strip():
        return None
    return {p.strip() for p in raw.split(",") if p.strip()}


class PluginManager:
    """Holds the pluggy manager, the loaded plugins and one :class:`Registry` per kind."""

    def __init__(self, group: str = ENTRY_POINT_GROUP) -> None:
        self.group = group
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.registries = {kind: Registry(kind, multi=(kind == "custom_op")) for kind in KINDS}
        #: Plugins that failed to load (only with ``load_entry_points(keep_going=True)``).
        self.broken: dict[str, BrokenPlugin] = {}

    # -- loading -------------------------------------------------------------------------------
    def load_entry_points(self, keep_going: bool = False) -> None:
        """Load every plugin found in the entry-point group (``infercore.plugins``), honouring
        ``INFERCORE_PLUGINS`` (allow-list; ``builtin`` is always kept) and
        ``INFERCORE_DISABLE_PLUGINS``. A plugin that fails to load raises :class:`PluginError`, or
        with ``keep_going`` is recorded in :attr:`broken` (for ``infercore plugins``) and skipped."""
        allow = _env_list("INFERCORE_PLUGINS")
        deny = _env_list("INFERCORE_DISABLE_PLUGINS") or set()
        eps = sorted(importlib_metadata.entry_points(group=self.group), key=lambda e: e.name != "builtin")
        seen: set[str] = set()
        for ep in eps:
            if ep.name in seen:
                continue
            seen.add(ep.name)
            if ep.name in deny or (allow is not None and ep.name not in allow and ep.name != "builtin"):
                continue
            dist = ep.dist.name if ep.dist is not None else "unknown"
            version = ep.dist.version if ep.dist is not None else "unknown"
            try:
                try:
                    module = ep.load()
                except Exception as exc:
                    raise PluginError(
                        f"plugin {ep.name!r} from distribution {dist} {version} failed to import "
                        f"({ep.value}): {type(exc).__name__}: {exc}. Uninstall it or disable it with "
                        f"INFERCORE_DISABLE_PLUGINS={ep.name}."
                    ) from exc
                self.register_module(module, ep.name, dist, version)
            except PluginError as exc:
                if not keep_going:
                    raise
                self.broken[ep.name] = BrokenPlugin(ep.name, dist, version, str(exc))

    def register_module(self, module: ModuleType | object, name: str, distribution: str = "local",
                        version: str = "0") -> PluginInfo:
        """Register a hook module (or object) as a plugin and run its ``register_*`` hooks."""
        problem = api_version_problem(getattr(module, "INFERCORE_PLUGIN_API", None))
        if problem is not None:
            raise PluginError(
                f"plugin {name!r} from distribution {distribution} {version} {problem}; install a "
                f"release of {distribution} made for this infercore, or disable it with "
                f"INFERCORE_DISABLE_PLUGINS={name}."
            )
        self.pm.register(module, name=name)
        hooks = sorted(h.name for h in self.pm.get_hookcallers(module) or [])
        info = PluginInfo(name, distribution, version, getattr(module, "__name__", str(module)), hooks)
        self.plugins[name] = info
        for kind, hook_name in KINDS.items():
            impl = getattr(module, hook_name, None)
            if impl is None:
                continue
            try:
                impl(register=self._register_fn(kind, name))
            except PluginError:
                raise
            except Exception as exc:
                raise PluginError(
                    f"plugin {name!r} from distribution {distribution} {version} failed in hook "
                    f"{hook_name}: {type(exc).__name__}: {exc}"
                ) from exc
        return info

    def _register_fn(self, kind: str, plugin: str) -> hookspecs.RegisterFn:
        registry = self.registries[kind]
        info = self.plugins.get(plugin)
        origin = f"{info.distribution} {info.version}" if info else "unknown distribution"

        def register(name: str, target: str, *, override: bool = False, **metadata: Any) -> None:
            if not isinstance(target, str) or ":" not in target:
                raise PluginError(f"plugin {plugin!r} registered {kind} {name!r} with target {target!r}; "
                                  "targets are lazy 'package.module:attr' strings")
            try:
                registry.add(Registration(kind, name, target, plugin, dict(metadata), origin), override=override)
            except ValueError as exc:
                raise PluginError(str(exc)) from exc

        return register

    # -- queries -------------------------------------------------------------------------------
    def registry(self, kind: str) -> Registry:
        return self.registries[kind]

    def registered_by(self, plugin: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for kind, reg in self.registries.items():
            names = sorted({r.name for r in reg.all() if r.plugin == plugin})
            if names:
                out[kind] = names
        return out

    def configure(self, config: Any) -> None:
        self.pm.hook.configure(config=config)


_lock = threading.Lock()
_manager: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager, loaded from entry points on first use."""
    global _manager
    with _lock:
        if _manager is None:
            manager = PluginManager()
            manager.load_entry_points()
            _manager = manager
        return _manager


def reset_plugin_manager(manager: PluginManager | None = None) -> None:
    """Drop the cached manager (tests, or after changing the plugin environment variables)."""
    global _manager
    with _lock:
        _manager = manager
