"""infercore-cuda's hook implementations. Importing this module imports nothing heavy."""

from __future__ import annotations

from infercore.plugins import hookimpl
from infercore.plugins.hookspecs import RegisterFn

INFERCORE_PLUGIN_API = 1


@hookimpl
def register_platforms(register: RegisterFn) -> None:
    register("cuda", "infercore_cuda.platform:CudaPlatform")
