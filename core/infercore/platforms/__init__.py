"""Platforms: the hardware interface plugins implement, and how one is chosen."""

from infercore.platforms.interface import Platform, PlatformCapabilities, ProbeResult
from infercore.platforms.selection import (
    NoPlatformError,
    current_platform,
    probe_all,
    select_platform_name,
    set_current_platform,
)

__all__ = [
    "NoPlatformError",
    "Platform",
    "PlatformCapabilities",
    "ProbeResult",
    "current_platform",
    "probe_all",
    "select_platform_name",
    "set_current_platform",
]
