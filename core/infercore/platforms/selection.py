"""Choosing the platform: the highest-priority available one, or the one ``INFERCORE_PLATFORM`` forces."""

from __future__ import annotations

import os
from dataclasses import dataclass

from infercore.platforms.interface import Platform, ProbeResult
from infercore.plugins.manager import PluginError, PluginManager, get_plugin_manager


class NoPlatformError(RuntimeError):
    """No platform can run here (or the forced one is missing or unavailable)."""


@dataclass
class ProbeReport:
    name: str
    plugin: str
    result: ProbeResult


def probe_all(manager: PluginManager | None = None) -> list[ProbeReport]:
    """Probe every registered platform. A probe that raises is a loud error naming its plugin."""
    manager = manager or get_plugin_manager()
    reports = []
    for reg in manager.registry("platform").all():
        info = manager.plugins.get(reg.plugin)
        try:
            cls = reg.load()
            result = cls.probe()
        except Exception as exc:
            dist = f"{info.distribution} {info.version}" if info else "unknown distribution"
            raise PluginError(
                f"platform {reg.name!r} of plugin {reg.plugin!r} ({dist}) failed to probe: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if "priority" in reg.metadata and result.available:
            result = ProbeResult(result.available, result.reason, int(reg.metadata["priority"]))
        reports.append(ProbeReport(reg.name, reg.plugin, result))
    return reports


def _describe(reports: list[ProbeReport]) -> str:
    if not reports:
        return "  (no platform plugin is installed; try `pip install infercore-cpu`)"
    return "\n".join(
        f"  {r.name} ({r.plugin}): {'available' if r.result.available else 'unavailable'} - {r.result.reason}"
        for r in reports
    )


def select_platform_name(manager: PluginManager | None = None) -> str:
    """Name of the platform to use, without instantiating it."""
    manager = manager or get_plugin_manager()
    forced = os.environ.get("INFERCORE_PLATFORM", "").strip()
    if "," in forced:
        raise NoPlatformError(
            f"INFERCORE_PLATFORM={forced!r} names several platforms; force exactly one "
            f"(registered: {', '.join(manager.registry('platform').names()) or 'none'})"
        )
    reports = probe_all(manager)
    if forced:
        match = [r for r in reports if r.name == forced]
        if not match:
            raise NoPlatformError(f"INFERCORE_PLATFORM={forced!r} but no such platform is registered. "
                                  f"Probes:\n{_describe(reports)}")
        if not match[0].result.available:
            raise NoPlatformError(f"INFERCORE_PLATFORM={forced!r} but it is unavailable: "
                                  f"{match[0].result.reason}. Probes:\n{_describe(reports)}")
        return forced
    available = [r for r in reports if r.result.available]
    if not available:
        raise NoPlatformError(f"no platform is available on this machine. Probes:\n{_describe(reports)}")
    available.sort(key=lambda r: r.result.priority, reverse=True)
    return available[0].name


_current: Platform | None = None


def current_platform(manager: PluginManager | None = None) -> Platform:
    """The platform instance for this process (selected once)."""
    global _current
    if _current is None:
        manager = manager or get_plugin_manager()
        name = select_platform_name(manager)
        _current = manager.registry("platform").load(name)()
    return _current


def set_current_platform(platform: Platform | None) -> None:
    """Replace the process's platform (tests; or after a worker process picks its device)."""
    global _current
    _current = platform
