"""The quantization interface: a format's config, and the methods that own a layer's weights.

A :class:`QuantizationConfig` is one checkpoint format (``fp8``, ``compressed-tensors``, …), read
from the checkpoint's ``quantization_config``. For each layer it hands out a
:class:`QuantizationMethod`, which creates the layer's parameters, turns them into what its
kernels want once the checkpoint is loaded, and runs the layer's GEMM. Linear layers take a
:class:`LinearWeightSpec`; other layers (a fused-MoE layer) define their own spec and ask the
config for their own kind of method.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from infercore.quantization.activation import ActivationQuant


@dataclass(frozen=True)
class LinearWeightSpec:
    """The weights a linear layer holds on this rank.

    ``output_sizes`` are the rows of each projection fused in the layer (``[q, k, v]``, ``[gate,
    up]``, or one entry), already divided over the tensor-parallel group; ``input_size`` is this
    rank's share of the input features. ``params_dtype`` is the model's dtype (activations, and
    weights a method keeps unquantized). ``tp_size`` ranks hold one such share each; ``input_split``
    says whether the shares split the input features (row-parallel) rather than the output rows.
    """

    input_size: int
    output_sizes: tuple[int, ...]
    params_dtype: torch.dtype
    tp_size: int = 1
    input_split: bool = False

    @property
    def output_size(self) -> int:
        """Rows of the whole (fused) weight on this rank."""
        return sum(self.output_sizes)


class QuantizationMethod(ABC):
    """Owns a layer's weights: how they are created, prepared after loading, and applied.

    The layer calls :meth:`create_weights` once while it is built, the loader calls
    :meth:`process_weights_after_loading` once after every checkpoint tensor (or dummy value) is in,
    and the layer's ``forward`` calls :meth:`apply`. Each parameter ``create_weights`` registers
    carries the layer's ``weight_loader`` and a layout (:func:`infercore.quantization.params.set_layout`)
    that tells the loader how to shard it over the tensor-parallel group.
    """

    @abstractmethod
    def create_weights(self, layer: nn.Module, spec: Any) -> None:
        """Register the layer's parameters (``layer.register_parameter``) for ``spec``."""

    def process_weights_after_loading(self, layer: nn.Module) -> None:  # noqa: B027 - optional hook
        """Turn the loaded parameters into what :meth:`apply` wants (nothing to do by default)."""

    @abstractmethod
    def apply(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """The layer's output for input ``x`` [..., input_size] (``bias`` added when given); ``x`` may be a
        :class:`~infercore.quantization.activation.QuantizedActivation` when :meth:`input_quantization`
        asks for one."""

    def input_quantization(self, layer: nn.Module) -> ActivationQuant | None:
        """How the kernel in front of the layer (a norm, an activation) may quantize its input, so that
        :meth:`apply` takes the quantized activation; None (the default): ``apply`` takes the tensor."""
        return None

    #: Whether :meth:`apply_silu_and_mul` computes a SwiGLU activation and the layer in one op (a down
    #: projection then takes the gate/up projection's output as it is).
    fuses_silu_and_mul = False

    def apply_silu_and_mul(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """The layer's output for ``silu(x[..., :I]) * x[..., I:]``, ``x`` being [..., 2 * input_size]; only
        called where :attr:`fuses_silu_and_mul` is set."""
        raise NotImplementedError(f"{type(self).__name__} does not fuse the SiLU-and-mul in front of it")


class QuantizationConfig(ABC):
    """One quantization format, as a checkpoint describes it.

    ``name`` is what ``--quantization`` and the checkpoint's ``quant_method`` call it. Registered
    through the ``register_quantization_methods`` hook (``register("fp8", "pkg.module:Fp8Config")``).
    """

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def from_checkpoint(cls, quantization_config: dict[str, Any] | None) -> QuantizationConfig:
        """The config of a checkpoint's ``quantization_config`` (None: ``--quantization NAME`` was given
        for a checkpoint with none; quantize its weights when loading, or raise saying that cannot be done)."""

    @abstractmethod
    def linear_method(self, prefix: str) -> QuantizationMethod:
        """The method of the linear layer named ``prefix`` (its module path in the model)."""

    def moe_method(self, prefix: str) -> QuantizationMethod:
        """The method of the fused-MoE layer named ``prefix``; formats without one refuse."""
        raise ValueError(f"quantization {self.name!r} has no method for mixture-of-experts layers yet; "
                         "run this model unquantized or with another format")

    def is_ignored(self, prefix: str) -> bool:
        """Whether the checkpoint keeps the layer named ``prefix`` unquantized."""
        return False
