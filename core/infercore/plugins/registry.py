"""Registries of lazily imported plugin objects, one per kind (platform, model, op…)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any


def import_target(target: str) -> Any:
    """Import ``"package.module:attr"`` (``attr`` may be dotted) and return the object."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"plugin target {target!r} must have the form 'package.module:attr'")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass
class Registration:
    """One named thing a plugin registered: where it lives, who registered it, and metadata."""

    kind: str
    name: str
    target: str
    plugin: str
    metadata: dict[str, Any] = field(default_factory=dict)
    #: The plugin's distribution and version ("infercore-acme 0.1.0"), named in import errors.
    origin: str = "unknown distribution"
    _loaded: Any = field(default=None, repr=False, compare=False)

    def load(self) -> Any:
        """Import the target (once) and return it; an import failure is a :class:`TargetImportError`
        naming the plugin, its distribution and version."""
        if self._loaded is None:
            try:
                self._loaded = import_target(self.target)
            except Exception as exc:
                raise TargetImportError(
                    f"{self.kind} {self.name!r} of plugin {self.plugin!r} ({self.origin}) could not be loaded "
                    f"from {self.target!r}: {type(exc).__name__}: {exc}. Reinstall or upgrade {self.origin}, "
                    f"or disable the plugin with INFERCORE_DISABLE_PLUGINS={self.plugin}"
                ) from exc
        return self._loaded

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "target": self.target, **self.metadata}


class TargetImportError(ImportError):
    """A registered ``module:attr`` target failed to import; the message names the plugin's distribution."""


class DuplicateRegistrationError(ValueError):
    """Two plugins registered the same name for the same kind without ``override=True``."""


class Registry:
    """Named registrations of one kind. Some kinds (custom ops) allow several per name, keyed by
    platform; those keep every registration and pick one at lookup."""

    def __init__(self, kind: str, multi: bool = False) -> None:
        self.kind = kind
        self.multi = multi
        self._items: dict[str, list[Registration]] = {}

    def add(self, reg: Registration, override: bool = False) -> None:
        existing = self._items.setdefault(reg.name, [])
        if self.multi:
            key = reg.metadata.get("platform")
            clash = [r for r in existing if r.metadata.get("platform") == key]
        else:
            clash = list(existing)
        if clash and not override:
            raise DuplicateRegistrationError(
                f"{self.kind} {reg.name!r} is registered by both plugin {clash[0].plugin!r} and "
                f"plugin {reg.plugin!r}; pass override=True in the plugin that means to replace it, "
                "or disable one with INFERCORE_DISABLE_PLUGINS"
            )
        for old in clash:
            existing.remove(old)
        existing.append(reg)

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def get(self, name: str, platform: str | None = None) -> Registration:
        """The registration for ``name``; for multi kinds the one for ``platform`` if present,
        else the platform-independent one. A multi-kind name with neither (only other platforms'
        registrations) is a ``KeyError``: another platform's kernel is never a fallback."""
        regs = self._items.get(name)
        if not regs:
            known = ", ".join(self.names()) or "none"
            raise KeyError(f"no {self.kind} named {name!r} is registered (registered: {known})")
        if not self.multi:
            return regs[0]
        for reg in regs:
            if platform is not None and reg.metadata.get("platform") == platform:
                return reg
        for reg in regs:
            if reg.metadata.get("platform") is None:
                return reg
        others = ", ".join(sorted(str(r.metadata.get("platform")) for r in regs))
        raise KeyError(f"{self.kind} {name!r} has no implementation for platform {platform!r} and no "
                       f"platform-independent reference (registered for: {others}); register one with "
                       f"platform={platform!r}, or a reference without a platform")

    def all(self) -> list[Registration]:
        return [r for regs in self._items.values() for r in regs]

    def load(self, name: str, platform: str | None = None) -> Any:
        return self.get(name, platform).load()
