"""The uniform of each verified position's acceptance test, keyed by the position's seed alone.

Each verified position has a seed: the row seed its output index would sample with
(``infercore.sample.gumbel.step_seed`` for a seeded request), so a seeded request's tests never depend
on which other requests share the batch. The uniform is a SplitMix64 finaliser of the salted seed,
written with int64 torch operations that give the same bits on every device. The residual draw of a
rejected position uses the same seed through ``gumbel_argmax``, a different generator (Philox or
torch's), so the test and the draw are independent.
"""

from __future__ import annotations

import torch

_U64 = 1 << 64


def _signed(value: int) -> int:
    """A 64-bit constant as the int64 with the same bits."""
    return value - _U64 if value >= 1 << 63 else value


#: Salt XORed into the seed, so the uniforms do not reuse any other stream keyed by the same seed.
_SALT = _signed(0xD1B54A32D192ED03)
_MIX1 = _signed(0xBF58476D1CE4E5B9)
_MIX2 = _signed(0x94D049BB133111EB)
#: Bits of the mixed value kept: a float32 in [0, 1) holds 24 exactly.
_BITS = 24


def _shift_right(value: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's ``>>`` keeps the sign)."""
    return (value >> bits) & ((1 << (64 - bits)) - 1)


def acceptance_uniforms(seeds: torch.Tensor) -> torch.Tensor:
    """float32 uniforms in [0, 1), multiples of 2**-24, one per int64 seed in ``seeds`` (any shape)."""
    z = seeds.long() ^ _SALT
    z = (z ^ _shift_right(z, 30)) * _MIX1
    z = (z ^ _shift_right(z, 27)) * _MIX2
    z = z ^ _shift_right(z, 31)
    return _shift_right(z, 64 - _BITS).float() * (2.0 ** -_BITS)
