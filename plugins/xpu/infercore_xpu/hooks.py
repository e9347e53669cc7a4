"""infercore-xpu's hook implementations. Importing this module imports nothing heavy."""

from __future__ import annotations

from infercore.plugin_api import RegisterFn, hookimpl

INFERCORE_PLUGIN_API = (1, 0)


@hookimpl
def register_platforms(register: RegisterFn) -> None:
    register("xpu", "infercore_xpu.platform:XpuPlatform")
