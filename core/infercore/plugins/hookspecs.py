"""Hook specifications: the whole plugin API of infercore.

A plugin is a module named by an entry point in the group ``infercore.plugins``. It declares
``INFERCORE_PLUGIN_API = (1, 0)`` (the oldest plugin API it needs) and implements any of the hooks
below with ``@infercore.plugin_api.hookimpl``; everything else it uses comes from
:mod:`infercore.plugin_api` too. Importing the module must be cheap and free of side effects: no
device runtime is imported and no device initialised there.

Every ``register_*`` hook receives a ``register`` callback::

    register(name, "package.module:attr", override=False, **metadata)

The target is a lazy ``"module:attr"`` string, imported only when the thing is used. Registering a
name that another plugin already registered is an error unless ``override=True``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import pluggy

if TYPE_CHECKING:
    from infercore.config import InfercoreConfig

PROJECT = "infercore"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class RegisterFn(Protocol):
    """The callback every ``register_*`` hook receives."""

    def __call__(self, name: str, target: str, *, override: bool = False, **metadata: Any) -> None: ...


@hookspec
def register_platforms(register: RegisterFn) -> None:
    """Register :class:`~infercore.plugin_api.Platform` subclasses by name.

    Metadata may carry ``priority`` (int); the platform's own ``probe()`` also reports one.
    The class is imported to run its probe, so its module must not initialise a device at import.
    """


@hookspec
def register_attention_backends(register: RegisterFn) -> None:
    """Register :class:`~infercore.plugin_api.AttentionBackend` subclasses by name."""


@hookspec
def register_models(register: RegisterFn) -> None:
    """Register model classes by Hugging Face architecture name (``config.architectures[0]``)."""


@hookspec
def register_custom_ops(register: RegisterFn) -> None:
    """Register implementations of custom ops (``rms_norm``, ``rotary_embedding``, ``silu_and_mul``…).

    Core registers the torch reference of each op (``infercore.plugin_api.op_reference``). A platform
    plugin registers a faster version under the same name and signature with metadata
    ``platform="cuda"`` (the platform it applies to); the op registry picks the implementation for
    the active platform and falls back to the reference, never to another platform's kernel.
    """


@hookspec
def register_tool_parsers(register: RegisterFn) -> None:
    """Register :class:`~infercore.parsers.ToolParser` subclasses by the name users pass to
    ``--tool-call-parser``."""


@hookspec
def register_reasoning_parsers(register: RegisterFn) -> None:
    """Register :class:`~infercore.parsers.ReasoningParser` subclasses by the name users pass to
    ``--reasoning-parser``."""


@hookspec
def register_structured_output_backends(register: RegisterFn) -> None:
    """Register :class:`~infercore.structured_output.StructuredOutputBackend` subclasses by name."""


@hookspec
def register_executors(register: RegisterFn) -> None:
    """Register executor classes (how workers are driven: in-process, multiprocess…) by name."""


@hookspec
def register_quantization_methods(register: RegisterFn) -> None:
    """Register :class:`~infercore.plugin_api.QuantizationConfig` subclasses by format name: the
    checkpoint's ``quantization_config.quant_method`` and the ``--quantization`` value (``"fp8"``).

    The config hands each linear layer a :class:`~infercore.plugin_api.QuantizationMethod` that creates
    its parameters, prepares them after loading and runs its GEMM (added in plugin API 1.1).
    """


@hookspec
def register_speculative_methods(register: RegisterFn) -> None:
    """Register :class:`~infercore.plugin_api.Proposer` subclasses by the speculative method name users
    give as ``speculative_config``'s ``method`` (``"ngram"``).

    Metadata ``needs_model=True`` marks a method that proposes with a draft model, so a configuration
    without ``model`` is refused. The proposer is built with a
    :class:`~infercore.plugin_api.ProposerSpec` and called once per step with every speculating row's
    token history; its docstring states the contract (added in plugin API 1.6).
    """


@hookspec
def configure(config: InfercoreConfig) -> None:
    """Inspect and adjust the engine configuration before the engine starts.

    Raise ``ValueError`` with a sentence that says what to change when the config cannot work.
    """
