"""The 4-bit weight-only checkpoint formats: ``quant_method: awq`` (AutoAWQ, GEMM layout) and
``quant_method: gptq`` (AutoGPTQ / GPTQModel, with or without act-order)."""

from __future__ import annotations

from typing import Any, ClassVar

from infercore.quantization.base import QuantizationConfig, QuantizationMethod
from infercore.quantization.int4_methods import AwqLinearMethod, GptqLinearMethod


def _bits_and_group(name: str, config: dict[str, Any]) -> int:
    """The checked ``group_size`` of a 4-bit ``config`` (-1: one group over all input features)."""
    bits = config.get("bits", config.get("w_bit", 4))
    if bits != 4:
        raise ValueError(f"{name} checkpoints with bits={bits} are not supported; infercore runs 4-bit {name} "
                         "weights only")
    group = int(config.get("group_size", config.get("q_group_size", 128)))
    if group != -1 and (group < 8 or group % 8):
        raise ValueError(f"{name} group_size {group} is not supported; use -1 or a multiple of 8 (128 is usual)")
    return group


def _ignored(prefix: str, names: tuple[str, ...]) -> bool:
    return any(prefix == n or prefix.endswith("." + n) or prefix.startswith(n + ".") for n in names)


class _Int4Config(QuantizationConfig):
    """What the 4-bit formats share: a group size, and modules the checkpoint leaves unquantized."""

    name: ClassVar[str]

    def __init__(self, group_size: int, ignored: tuple[str, ...]) -> None:
        self.group_size = group_size
        self.ignored = ignored

    @classmethod
    def _require_checkpoint(cls, quantization_config: dict[str, Any] | None) -> dict[str, Any]:
        if quantization_config is None:
            raise ValueError(f"--quantization {cls.name} needs a checkpoint saved in that format (its config.json "
                             f"has a quantization_config with quant_method {cls.name!r}); infercore does not "
                             "quantize weights to 4 bits while loading. Use --quantization fp8 for that")
        return quantization_config

    def is_ignored(self, prefix: str) -> bool:
        return _ignored(prefix, self.ignored)


class AwqConfig(_Int4Config):
    """AutoAWQ checkpoints of the GEMM version with zero-points (``zero_point: true``)."""

    name = "awq"

    @classmethod
    def from_checkpoint(cls, quantization_config: dict[str, Any] | None) -> AwqConfig:
        config = cls._require_checkpoint(quantization_config)
        group = _bits_and_group("AWQ", config)
        version = str(config.get("version", "gemm")).lower()
        if version != "gemm":
            raise ValueError(f"AWQ version {version!r} is not supported; infercore reads the 'gemm' layout "
                             "(AutoAWQ's default)")
        if not config.get("zero_point", True):
            raise ValueError("AWQ checkpoints without zero-points (zero_point: false) are not supported")
        return cls(group, tuple(config.get("modules_to_not_convert") or ()))

    def linear_method(self, prefix: str) -> QuantizationMethod:
        return AwqLinearMethod(self.group_size)


class GptqConfig(_Int4Config):
    """GPTQ checkpoints (``checkpoint_format`` ``gptq``, whose stored zeros are one less than the zeros,
    or ``gptq_v2``), symmetric or not, with ``desc_act`` (act-order) or not."""

    name = "gptq"
    _ZERO_OFFSETS: ClassVar[dict[str, int]] = {"gptq": 1, "gptq_v2": 0}

    def __init__(self, group_size: int, ignored: tuple[str, ...], desc_act: bool, zero_offset: int) -> None:
        super().__init__(group_size, ignored)
        self.desc_act = desc_act
        self.zero_offset = zero_offset

    @classmethod
    def from_checkpoint(cls, quantization_config: dict[str, Any] | None) -> GptqConfig:
        config = cls._require_checkpoint(quantization_config)
        group = _bits_and_group("GPTQ", config)
        fmt = str(config.get("checkpoint_format", "gptq"))
        if fmt not in cls._ZERO_OFFSETS:
            raise ValueError(f"GPTQ checkpoint_format {fmt!r} is not supported; use 'gptq' or 'gptq_v2'")
        return cls(group, tuple(config.get("modules_to_not_convert") or ()), bool(config.get("desc_act", False)),
                   cls._ZERO_OFFSETS[fmt])

    def linear_method(self, prefix: str) -> QuantizationMethod:
        return GptqLinearMethod(self.group_size, self.desc_act, self.zero_offset)
