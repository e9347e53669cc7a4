"""infercore: a plugin-based LLM inference and serving engine.

``from infercore import LLM, SamplingParams``. Importing the package is cheap: the engine (and torch)
load on first use of ``LLM``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infercore.version import __version__

if TYPE_CHECKING:
    from infercore.config import InfercoreConfig
    from infercore.entrypoints.llm import LLM
    from infercore.lora.request import LoRARequest
    from infercore.outputs import CompletionOutput, RequestOutput
    from infercore.sampling_params import SamplingParams, StructuredOutputsParams

_LAZY = {
    "LLM": "infercore.entrypoints.llm",
    "SamplingParams": "infercore.sampling_params",
    "StructuredOutputsParams": "infercore.sampling_params",
    "RequestOutput": "infercore.outputs",
    "CompletionOutput": "infercore.outputs",
    "InfercoreConfig": "infercore.config",
    "LoRARequest": "infercore.lora.request",
}

__all__ = ["LLM", "CompletionOutput", "InfercoreConfig", "LoRARequest", "RequestOutput", "SamplingParams",
           "StructuredOutputsParams", "__version__"]


def __getattr__(name: str) -> Any:
    # PEP 562 lazy exports keep `import infercore` free of torch.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'infercore' has no attribute {name!r}")
