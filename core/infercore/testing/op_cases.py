"""Custom-op conformance cases: inputs for every op core defines, and how to compare with its reference.

Each case calls the platform's kernel and the torch reference in :mod:`infercore.ops.reference` on the
same (cloned) inputs and returns the largest relative difference of their outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from infercore.ops import fp8_math, reference

Inputs = Callable[[torch.device, torch.dtype, torch.Generator], tuple[Any, ...]]


def _rand(gen: torch.Generator, device: torch.device, dtype: torch.dtype, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)


def _cos_sin(device: torch.device, rot_dim: int, positions: int = 64) -> torch.Tensor:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rot_dim, 2).float() / rot_dim))
    angles = torch.arange(positions).float().unsqueeze(1) * inv_freq
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(device)


def _positions(gen: torch.Generator, device: torch.device, n: int = 7) -> torch.Tensor:
    return torch.randint(0, 64, (n,), generator=gen).to(device)


def _penalty_args(gen: torch.Generator, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Float32 logits of 4 rows reading rows of 5-row seen-token tables; one row with no penalty."""
    logits = torch.randn(4, 50, generator=gen).to(device)
    prompt = (torch.rand(5, 50, generator=gen) < 0.2).to(device)
    counts = torch.randint(0, 3, (5, 50), generator=gen, dtype=torch.int32).to(device)
    rows = torch.tensor([2, 0, 4, 1], device=device)
    repetition = torch.tensor([1.3, 1.0, 0.8, 1.1], device=device)
    presence = torch.tensor([0.5, 0.0, -0.2, 0.0], device=device)
    frequency = torch.tensor([0.1, 0.0, 0.3, 0.0], device=device)
    return logits, rows, prompt, counts, repetition, presence, frequency


def _fp8_weight(gen: torch.Generator, device: torch.device, n: int, k: int,
                block: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """An FP8 weight [n, k] and its float32 scales: per block of ``block`` x ``block``, or per row."""
    w = torch.randn(n, k, generator=gen) * 0.1
    if block is None:
        q, scale = fp8_math.quantize_per_token(w)
        return q.to(device), scale.reshape(-1).to(device)
    q, scale = fp8_math.quantize_blockwise(w, block, block)
    return q.to(device), scale.to(device)


def _fp8_activation(gen: torch.Generator, device: torch.device, dtype: torch.dtype, m: int, k: int,
                    group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An activation [m, k] quantized as the norm in front of an FP8 linear hands it over: fp8 values and
    float32 scales per token and ``group`` columns."""
    q, scale = fp8_math.quantize_per_group(torch.randn(m, k, generator=gen).to(dtype).float(), group)
    return q.to(device), scale.to(device)


def _accept_drafts_args(gen: torch.Generator, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Drafts of 9 rows (greedy and sampled, some without drafts) and the per-draft target facts."""
    rows, width = 9, 4
    drafts = torch.randint(0, 50, (rows, width), generator=gen)
    argmax = torch.where(torch.rand(rows, width, generator=gen) < 0.7, drafts, drafts + 1)
    num_drafts = torch.tensor([0, 1, 2, 3, 4, 4, 4, 2, 4])
    greedy = torch.arange(rows) % 3 == 0
    target, draft = torch.rand(rows, width, generator=gen), torch.rand(rows, width, generator=gen)
    uniforms = torch.randint(0, 1 << 24, (rows, width), generator=gen).float() * 2.0 ** -24
    return tuple(t.to(device) for t in (drafts, num_drafts, greedy, argmax, target, draft, uniforms))


def _lora_apply_args(gen: torch.Generator, device: torch.device, dtype: torch.dtype,
                     tokens: int) -> tuple[Any, ...]:
    """A merged q/k/v-like projection (three slices of 24, 16, 16; hidden 48) over ``tokens`` tokens of three
    adapter slots of rank 8, some tokens without an adapter; the grouped layout as the runner builds it."""
    import numpy as np

    from infercore.lora.step_state import group_by_slot, max_tiles, tile_rows

    slots = torch.randint(-1, 3, (tokens,), generator=gen).numpy().astype(np.int32)
    rows = tile_rows(tokens)
    sorted_tokens, tiles = group_by_slot(slots, 3, rows)
    table = np.full((max_tiles(tokens, 3), 3), -1, dtype=np.int32)
    table[: len(tiles)] = tiles
    padded = np.zeros(tokens, dtype=np.int32)
    padded[: len(sorted_tokens)] = sorted_tokens
    ints = [torch.from_numpy(v).to(device) for v in (slots, padded, table)]
    return (_rand(gen, device, dtype, tokens, 56), _rand(gen, device, dtype, tokens, 48),
            _rand(gen, device, dtype, 3, 24, 48) * 0.3, _rand(gen, device, dtype, 3, 56, 8) * 0.3, *ints, rows,
            (0, 24, 40, 56))


def _lora_linear_args(gen: torch.Generator, device: torch.device, dtype: torch.dtype,
                      tokens: int) -> tuple[Any, ...]:
    """``lora_apply``'s adapter operands (:func:`_lora_apply_args`) around a [56, 48] weight with a bias."""
    _, x, a, b, *grouping = _lora_apply_args(gen, device, dtype, tokens)
    return (x, _rand(gen, device, dtype, 56, 48), _rand(gen, device, dtype, 56), a, b, *grouping, False)


#: Inputs of each op, for ``(device, dtype, generator)``. An op of ``plugin_api.CUSTOM_OPS`` missing here
#: is not checked by the kit yet.
OP_INPUTS: dict[str, Inputs] = {
    "linear": lambda d, t, g: (_rand(g, d, t, 5, 48), _rand(g, d, t, 24, 48), _rand(g, d, t, 24)),
    "rms_norm": lambda d, t, g: (_rand(g, d, t, 5, 64), _rand(g, d, t, 64), 1e-6),
    "fused_add_rms_norm": lambda d, t, g: (_rand(g, d, t, 5, 64), _rand(g, d, t, 5, 64), _rand(g, d, t, 64), 1e-6),
    "rotary_embedding": lambda d, t, g: (_positions(g, d), _rand(g, d, t, 7, 4 * 32), _rand(g, d, t, 7, 2 * 32),
                                         _cos_sin(d, 32), 32, True),
    "qk_norm_rotary": lambda d, t, g: (_positions(g, d), _rand(g, d, t, 7, 4 * 32), _rand(g, d, t, 7, 2 * 32),
                                       _rand(g, d, t, 32), _rand(g, d, t, 32), 1e-6, _cos_sin(d, 32), 32, True),
    "silu_and_mul": lambda d, t, g: (_rand(g, d, t, 5, 2 * 48),),
    "silu_and_mul_linear": lambda d, t, g: (_rand(g, d, t, 3, 2 * 48), _rand(g, d, t, 24, 48), _rand(g, d, t, 24)),
    "gelu": lambda d, t, g: (_rand(g, d, t, 5, 48), "none"),
    "gelu_and_mul": lambda d, t, g: (_rand(g, d, t, 5, 2 * 48), "tanh"),
    "layer_norm": lambda d, t, g: (_rand(g, d, t, 5, 64), _rand(g, d, t, 64), _rand(g, d, t, 64), 1e-5),
    "embedding": lambda d, t, g: (torch.randint(0, 40, (9,), generator=g).to(d), _rand(g, d, t, 40, 16)),
    "alibi_bias": lambda d, t, g: (torch.rand(4, generator=g).to(d), 5, 12),
    "fp8_linear": lambda d, t, g: (_rand(g, d, t, 5, 64), *_fp8_weight(g, d, 32, 64, None), _rand(g, d, t, 32)),
    "fp8_block_linear": lambda d, t, g: (_rand(g, d, t, 5, 256), *_fp8_weight(g, d, 256, 256, 128), 128, 128,
                                         _rand(g, d, t, 256)),
    "fp8_linear_quantized": lambda d, t, g: (*_fp8_activation(g, d, t, 5, 64, 64), *_fp8_weight(g, d, 32, 64, None),
                                             _rand(g, d, t, 32), t),
    "fp8_block_linear_quantized": lambda d, t, g: (*_fp8_activation(g, d, t, 5, 256, 128),
                                                   *_fp8_weight(g, d, 256, 256, 128), 128, 128, _rand(g, d, t, 256), t),
    "apply_penalties": lambda d, t, g: _penalty_args(g, d),
    "accept_drafts": lambda d, t, g: _accept_drafts_args(g, d),
    "lora_apply": lambda d, t, g: _lora_apply_args(g, d, t, 37),
    "lora_linear": lambda d, t, g: _lora_linear_args(g, d, t, 3),
    "gumbel_argmax": lambda d, t, g: (_rand(g, d, t, 6, 50) * 3, torch.tensor([0.0, 0.0, 0.7, 1.0, 0.0, 2.0],
                                      device=d), torch.arange(6, device=d) * 7919),
}

#: Extra variants checked for ops with modes (name suffix → argument overrides by position).
OP_VARIANTS: dict[str, dict[str, dict[int, Any]]] = {
    "gelu": {"tanh": {1: "tanh"}},
    "gelu_and_mul": {"exact": {1: "none"}},
    "rotary_embedding": {"gptj": {5: False}},
    "layer_norm": {"no-bias": {2: None}},
    "linear": {"no-bias": {2: None}},
    "lora_linear": {"no-bias": {2: None}},
    "fp8_linear": {"no-bias": {3: None}},
    "fp8_block_linear": {"no-bias": {5: None}},
    "fp8_linear_quantized": {"no-bias": {4: None}},
    "fp8_block_linear_quantized": {"no-bias": {6: None}},
}


def _clone(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _flat(result: Any) -> list[torch.Tensor]:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _gumbel_error(kernel: Callable[..., Any], args: tuple[Any, ...]) -> float:
    """Greedy rows must be the argmax; sampled rows any token of finite logit (the random streams differ)."""
    logits, temperature, _ = args
    tokens = kernel(*_clone(args)).cpu()
    greedy = (temperature == 0).cpu()
    if tokens.shape != (logits.shape[0],) or tokens.dtype != torch.int64:
        return float("inf")
    wrong = (tokens[greedy] != logits.float().argmax(-1).cpu()[greedy]).sum()
    return float(wrong)


def op_error(name: str, kernel: Callable[..., Any], device: torch.device, dtype: torch.dtype,
             overrides: dict[int, Any] | None = None, seed: int = 0) -> float:
    """Largest relative difference between ``kernel`` and the reference of op ``name`` on the op's inputs."""
    gen = torch.Generator().manual_seed(seed)
    args = list(OP_INPUTS[name](device, dtype, gen))
    for index, value in (overrides or {}).items():
        args[index] = value
    if name == "gumbel_argmax":
        return _gumbel_error(kernel, tuple(args))
    expected = _flat(getattr(reference, name)(*_clone(tuple(args))))
    got = _flat(kernel(*_clone(tuple(args))))
    if len(got) != len(expected):
        return float("inf")
    worst = 0.0
    for g, e in zip(got, expected, strict=True):
        if g.shape != e.shape:
            return float("inf")
        scale = max(float(e.float().abs().max()), 1e-6)
        worst = max(worst, float((g.float() - e.float()).abs().max()) / scale)
    return worst
