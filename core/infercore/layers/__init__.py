"""Model building blocks; the hardware-specific parts run through :func:`infercore.ops.get_op`."""

from infercore.layers.activation import SiluAndMul
from infercore.layers.fused_linear import MergedColumnParallelLinear, QKVParallelLinear
from infercore.layers.layernorm import RMSNorm
from infercore.layers.linear import ColumnParallelLinear, RowParallelLinear
from infercore.layers.rotary_embedding import RotaryEmbedding, get_rope
from infercore.layers.tensor_parallel import TensorParallelState, get_tp_state, set_tp_state
from infercore.layers.vocab_embedding import ParallelLMHead, VocabParallelEmbedding

__all__ = [
    "ColumnParallelLinear",
    "MergedColumnParallelLinear",
    "ParallelLMHead",
    "QKVParallelLinear",
    "RMSNorm",
    "RotaryEmbedding",
    "RowParallelLinear",
    "SiluAndMul",
    "TensorParallelState",
    "VocabParallelEmbedding",
    "get_rope",
    "get_tp_state",
    "set_tp_state",
]
