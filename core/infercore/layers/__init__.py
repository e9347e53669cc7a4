"""Model building blocks; the hardware-specific parts run through :func:`infercore.ops.get_op`."""

from infercore.layers.activation import GELU, GeGLU, SiluAndMul
from infercore.layers.alibi import alibi_slopes
from infercore.layers.fused_linear import MergedColumnParallelLinear, QKVParallelLinear
from infercore.layers.layernorm import GemmaRMSNorm, LayerNorm, RMSNorm
from infercore.layers.linear import ColumnParallelLinear, RowParallelLinear
from infercore.layers.position_embedding import LearnedPositionEmbedding
from infercore.layers.rotary_embedding import RotaryEmbedding, get_rope
from infercore.layers.tensor_parallel import TensorParallelState, get_tp_state, set_tp_state
from infercore.layers.vocab_embedding import ParallelLMHead, VocabParallelEmbedding

__all__ = [
    "GELU",
    "ColumnParallelLinear",
    "GeGLU",
    "GemmaRMSNorm",
    "LayerNorm",
    "LearnedPositionEmbedding",
    "MergedColumnParallelLinear",
    "ParallelLMHead",
    "QKVParallelLinear",
    "RMSNorm",
    "RotaryEmbedding",
    "RowParallelLinear",
    "SiluAndMul",
    "TensorParallelState",
    "VocabParallelEmbedding",
    "alibi_slopes",
    "get_rope",
    "get_tp_state",
    "set_tp_state",
]
