"""luminal.nn: modules that record into the graph of the tensor they are called on, with weights named as in
PyTorch / Hugging Face state dicts (see `luminal/nn/module.py`); whole models live in `luminal.nn.models`."""

from luminal.nn.activation import GELU, HF_ACTIVATIONS, ReLU, SiLU, Tanh, activation_fn
from luminal.nn.attention import (
    MultiheadAttention,
    causal_mask,
    combine_masks,
    merge_heads,
    padding_mask,
    split_heads,
)
from luminal.nn.conv import Conv1d, Conv2d
from luminal.nn.grouped_attention import GroupedQueryAttention, KVCache
from luminal.nn.linear import Embedding, Linear
from luminal.nn.mlp import MLP, SwiGLU
from luminal.nn.module import Module, ModuleList, Sequential
from luminal.nn.normalization import BatchNorm1d, BatchNorm2d, LayerNorm, RMSNorm
from luminal.nn.pooling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AvgPool1d,
    AvgPool2d,
    MaxPool1d,
    MaxPool2d,
    mean_pool,
)
from luminal.nn.rotary import RotaryEmbedding, apply_rotary
from luminal.nn.transformer import DecoderLayer, TransformerEncoderLayer

__all__ = [
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AvgPool1d",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv1d",
    "Conv2d",
    "DecoderLayer",
    "Embedding",
    "GELU",
    "GroupedQueryAttention",
    "HF_ACTIVATIONS",
    "KVCache",
    "LayerNorm",
    "Linear",
    "MLP",
    "MaxPool1d",
    "MaxPool2d",
    "Module",
    "ModuleList",
    "MultiheadAttention",
    "RMSNorm",
    "ReLU",
    "RotaryEmbedding",
    "Sequential",
    "SiLU",
    "SwiGLU",
    "Tanh",
    "TransformerEncoderLayer",
    "activation_fn",
    "apply_rotary",
    "causal_mask",
    "combine_masks",
    "mean_pool",
    "merge_heads",
    "padding_mask",
    "split_heads",
]
