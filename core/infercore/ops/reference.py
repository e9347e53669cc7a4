"""Torch reference implementations of the custom ops.

These define what each op computes; a platform plugin may register a faster kernel under the
same name with the same signature. Norms accumulate in float32 and cast back, as HF models do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from infercore.ops.acceptance import accept_drafts  # noqa: F401
from infercore.ops.dispatch import get_op
from infercore.ops.encoder_attention import encoder_attention  # noqa: F401
from infercore.ops.expert_dispatch import AllToAllExpertDispatcher as expert_dispatcher  # noqa: F401

# The fused-MoE op, the FP8 and INT4 GEMMs and the acceptance walk have files of their own; they are ops like the rest.
from infercore.ops.fp8_fused import (  # noqa: F401
    fp8_block_linear_quantized,
    fp8_linear_quantized,
    fused_add_rms_norm_quant,
    rms_norm_quant,
    silu_and_mul_quant,
)
from infercore.ops.fp8_math import fp8_block_linear, fp8_linear  # noqa: F401
from infercore.ops.int4_math import int4_linear  # noqa: F401
from infercore.ops.lora_reference import lora_apply, lora_expand, lora_linear, lora_shrink  # noqa: F401
from infercore.ops.moe_fp8_reference import fused_moe_fp8_block  # noqa: F401
from infercore.ops.moe_reference import fused_moe  # noqa: F401


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * x / sqrt(mean(x**2) + eps)`` over the last dimension."""
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual = x + residual``; returns ``(rms_norm(residual), residual)``."""
    new_residual = x + residual
    return rms_norm(new_residual, weight, eps), new_residual


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """Rotate the last dimension of ``x`` [T, heads, rot_dim] by per-token ``cos``/``sin`` [T, 1, rot_dim/2]."""
    if is_neox:
        x1, x2 = x.chunk(2, dim=-1)
    else:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if is_neox:
        return torch.cat((o1, o2), dim=-1)
    return torch.stack((o1, o2), dim=-1).flatten(-2)


def _apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_size: int,
                  is_neox: bool) -> torch.Tensor:
    num_tokens = x.shape[0]
    rot_dim = cos.shape[-1] * 2
    heads = x.view(num_tokens, -1, head_size)
    rotated = _rotate(heads[..., :rot_dim].float(), cos, sin, is_neox).to(x.dtype)
    if rot_dim < head_size:
        rotated = torch.cat((rotated, heads[..., rot_dim:]), dim=-1)
    return rotated.reshape(x.shape)


def rotary_embedding(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor,
                     head_size: int, is_neox: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply rotary position embedding to ``q`` [T, heads*head_size] and ``k`` [T, kv_heads*head_size].

    ``cos_sin_cache`` is [max_position, rot_dim] holding ``cat(cos, sin)`` per position; only the first
    ``rot_dim`` features of each head rotate. ``is_neox`` rotates halves (GPT-NeoX/Llama) rather
    than interleaved pairs (GPT-J).
    """
    cos, sin = cos_sin_cache.index_select(0, positions).float().unsqueeze(1).chunk(2, dim=-1)
    return (_apply_rotary(q, cos, sin, head_size, is_neox), _apply_rotary(k, cos, sin, head_size, is_neox))


def qk_norm_rotary(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                   k_weight: torch.Tensor, eps: float, cos_sin_cache: torch.Tensor, head_size: int,
                   is_neox: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm every head of ``q`` and ``k``, then apply rotary embedding; in place, and returns ``(q, k)``.

    ``q`` is [T, heads*head_size] and ``k`` [T, kv_heads*head_size]; either may be a row-strided view
    (a column slice of the fused QKV projection) as long as its last dimension is contiguous. Each
    head is normed as :func:`rms_norm` does with ``q_weight`` / ``k_weight`` [head_size] and rounded to
    the activation dtype, then rotated as :func:`rotary_embedding` does. Only full rotary is
    supported: ``cos_sin_cache`` must be [max_position, head_size].
    """
    check_full_rotary(cos_sin_cache, head_size)
    num_tokens = q.shape[0]
    q_normed = rms_norm(q.view(num_tokens, -1, head_size), q_weight, eps).to(q.dtype).view(num_tokens, -1)
    k_normed = rms_norm(k.view(num_tokens, -1, head_size), k_weight, eps).to(k.dtype).view(num_tokens, -1)
    q_rot, k_rot = rotary_embedding(positions, q_normed, k_normed, cos_sin_cache, head_size, is_neox)
    q.copy_(q_rot.view(q.shape))
    k.copy_(k_rot.view(k.shape))
    return q, k


def check_full_rotary(cos_sin_cache: torch.Tensor, head_size: int) -> None:
    """Raise ``ValueError`` unless ``cos_sin_cache`` rotates whole heads (rot_dim == head_size)."""
    rot_dim = cos_sin_cache.shape[-1]
    if rot_dim != head_size:
        raise ValueError(f"qk_norm_rotary needs full rotary (rot_dim == head_size); got rot_dim {rot_dim} "
                         f"for head size {head_size}; norm the heads and call rotary_embedding instead")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias``: the dense GEMM of every linear layer and the LM head."""
    return F.linear(x, weight, bias)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dimension (float32 inside)."""
    w = weight.float()
    b = bias.float() if bias is not None else None
    return F.layer_norm(x.float(), (x.shape[-1],), w, b, eps).to(x.dtype)


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GELU: exact (``approximate="none"``, ``x * Phi(x)``) or the tanh approximation (``"tanh"``)."""
    return F.gelu(x, approximate=approximate)


def gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GeGLU: ``gelu(x[..., :I]) * x[..., I:]`` for ``x`` of last dimension ``2*I``."""
    gate, up = x.chunk(2, dim=-1)
    return F.gelu(gate, approximate=approximate) * up


def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Rows ``weight[ids]``: token and learned (absolute) position embeddings."""
    return F.embedding(ids, weight)


def alibi_bias(slopes: torch.Tensor, query_len: int, seq_len: int) -> torch.Tensor:
    """[heads, query_len, seq_len] float32 ALiBi bias ``slope_h * (t - p)`` for the last ``query_len``
    query positions ``p`` of a ``seq_len``-token context and key positions ``t``."""
    q_pos = torch.arange(seq_len - query_len, seq_len, device=slopes.device).unsqueeze(1)
    k_pos = torch.arange(seq_len, device=slopes.device).unsqueeze(0)
    return slopes.float().view(-1, 1, 1) * (k_pos - q_pos).float()


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :I]) * x[..., I:]`` for ``x`` of last dimension ``2*I``."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def silu_and_mul_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``linear(silu_and_mul(x), weight, bias)``: a SwiGLU MLP's activation and down projection, through the
    current platform's ``silu_and_mul`` and ``linear`` (a platform may fuse the two: the activation computed
    as the GEMM loads its input)."""
    return get_op("linear")(get_op("silu_and_mul")(x), weight, bias)


#: Exponential draws can be exactly 0 (or overflow) in float32; clamping keeps ``log(q)`` finite, so a
#: -inf logit stays -inf and no score is NaN.
_TINY = torch.finfo(torch.float32).tiny
_HUGE = torch.finfo(torch.float32).max


def gumbel_argmax(logits: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor,
                  threshold: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row of ``logits`` [B, V] (any float dtype): a draw from ``softmax(logits / T)``.

    ``temperature`` [B] float32: rows with 0 take ``torch.argmax`` of their logits (greedy, ties to
    the smallest index); other rows take ``argmax_v(logits[b, v] / T[b] - log q[b, v])`` with
    ``q ~ Exp(1)`` (the Gumbel-max trick), computed in float32. ``seeds`` [B] int64 (non-negative)
    key each row's draws, so a row's token depends only on its own logits, temperature and seed.
    Returns int64 tokens [B]; a -inf logit is chosen only when its whole row is -inf. ``threshold``
    [B, 1] (optional, the logits' dtype or float32): logits below their row's threshold count as -inf,
    as if masked before the call (the top-k/top-p cut, without a pass of its own over the logits).

    This reference draws ``q`` from a ``torch.Generator`` seeded with ``seeds[b]``; platform kernels
    (Triton's uses Philox keyed by the seed and the token id) are exact samplers of the same
    distribution from other random streams, so the same seed gives different tokens across them.
    """
    if threshold is not None:
        logits = logits.masked_fill(logits < threshold, float("-inf"))
    tokens = logits.argmax(dim=-1)
    rows = (temperature > 0).nonzero().squeeze(1)
    if rows.numel() == 0:
        return tokens
    generator = torch.Generator(device=logits.device)
    q = torch.empty((rows.numel(), logits.shape[1]), dtype=torch.float32, device=logits.device)
    for i, seed in enumerate(seeds[rows].tolist()):
        generator.manual_seed(seed)
        q[i].exponential_(generator=generator)
    scores = logits[rows].float() / temperature[rows].float().unsqueeze(1) - q.clamp_(_TINY, _HUGE).log_()
    tokens[rows] = scores.argmax(dim=-1)
    return tokens


def apply_penalties(logits: torch.Tensor, rows: torch.Tensor, prompt: torch.Tensor, output_counts: torch.Tensor,
                    repetition: torch.Tensor, presence: torch.Tensor, frequency: torch.Tensor) -> torch.Tensor:
    """Repetition, presence and frequency penalties on ``logits`` [B, V] float32, in place; returns it.

    Batch row ``b`` reads row ``rows[b]`` ([B] int64) of the tables ``prompt`` [R, V] bool (tokens of
    its prompt) and ``output_counts`` [R, V] int32 (occurrences in its output). A token seen in either
    has its logit divided by ``repetition[b]`` when positive, multiplied when not; then every logit
    loses ``frequency[b] * count + presence[b] * (count > 0)``. The penalties are [B] or [B, 1]
    float32; repetition 1 and presence and frequency 0 leave a row's logits bit for bit as they were.
    Each step is one float32 operation rounded on its own (no fused multiply-add), so kernels that
    keep that order give the same bits.
    """
    counts = output_counts.index_select(0, rows).float()
    in_output = counts > 0
    seen = prompt.index_select(0, rows) | in_output
    repetition, presence, frequency = (p.reshape(-1, 1) for p in (repetition, presence, frequency))
    repeated = torch.where(logits > 0, logits / repetition, logits * repetition)
    logits.copy_(torch.where(seen, repeated, logits))
    return logits.sub_(frequency * counts + presence * in_output)
