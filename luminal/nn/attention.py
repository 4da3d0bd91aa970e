"""Multi-head attention: head splitting, masks, and torch.nn.MultiheadAttention with its packed projection.

Shapes follow batch_first=True throughout: [batch, seq, embed] in and out, [batch, heads, seq, head_dim]
inside. Masks handed to `scaled_dot_product_attention` are bool "may attend" tensors (True = allowed); the
torch.nn.MultiheadAttention conventions (True = *blocked*) are converted at its boundary only.
"""

from __future__ import annotations

from typing import Any

from luminal import dtypes as dt
from luminal import functional as F
from luminal.hl import prim
from luminal.nn.linear import Linear
from luminal.nn.module import Module
from luminal.symbolic import Dim
from luminal.tensor import Tensor
from luminal.view import ShapeError, format_shape, idx


def split_heads(x: Tensor, heads: int) -> Tensor:
    """[batch, seq, heads * head_dim] -> [batch, heads, seq, head_dim] (a view)."""
    b, s, d = x.shape
    if not isinstance(d, int) or d % heads:
        raise ShapeError(f"split_heads: {heads} heads do not divide the last dim of {format_shape(x.shape)}")
    return x.reshape(b, s, heads, d // heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """[batch, heads, seq, head_dim] -> [batch, seq, heads * head_dim]."""
    b, h, s, d = x.shape
    merged = x.transpose(1, 2).reshape(b, s, h * d)
    # Merging heads of a transposed buffer is not a strided view: every later read of it (the output
    # projection reads it expanded over all its output features) would go through div/mod index arithmetic.
    # Multiplying by 1 records a node, so the merged heads are laid out once, as torch's `.contiguous()` does
    # at this point; the compiler's identity pass (x * 1 = x) removes it again where views are free.
    return merged * 1.0


def padding_mask(attention_mask: Tensor) -> Tensor:
    """A Hugging Face attention_mask [batch, kv_len] of 1 (token) / 0 (padding) as bool [batch, 1, 1, kv_len]."""
    if attention_mask.ndim != 2:
        raise ShapeError(f"attention_mask must be [batch, seq], got {format_shape(attention_mask.shape)}")
    b, s = attention_mask.shape
    return attention_mask.to(dt.bool_).reshape(b, 1, 1, s)


def causal_mask(graph, q_len: Dim, kv_len: Dim) -> Tensor:
    """bool [q_len, kv_len]: query i may see key j when j <= i + (kv_len - q_len).

    Aligned bottom-right: the queries are the last q_len positions of the kv_len keys, which is what a decoder
    with a KV cache needs (and equals torch's top-left tril when q_len == kv_len).
    """
    i, j = idx(0, q_len), idx(1, kv_len)
    allowed = j < i + 1 + (kv_len - q_len)  # an index expression, so q_len and kv_len may be symbols
    return prim.cast(prim.iota(graph, allowed, (q_len, kv_len), dt.int32), dt.bool_)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """The positions every given bool mask allows (broadcast), or None when there is no mask."""
    present = [m for m in masks if m is not None]
    out = present[0] if present else None
    for m in present[1:]:
        out = F.logical_and(out, m)
    return out


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention(embed_dim, num_heads, bias, batch_first=True) in inference.

    Parameters as torch names them: in_proj_weight [3E, E] (query, key and value rows stacked), in_proj_bias
    [3E], out_proj.{weight, bias}. Returns the attention output only (torch's need_weights=False result).
    """

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True, dtype: Any = dt.float32) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: {num_heads} heads do not divide embed_dim {embed_dim}")
        self.embed_dim, self.num_heads, self.has_bias = embed_dim, num_heads, bias
        self.declare("in_proj_weight", (3 * embed_dim, embed_dim), dtype)
        if bias:
            self.declare("in_proj_bias", (3 * embed_dim,), dtype)
        self.out_proj = Linear(embed_dim, embed_dim, bias, dtype)

    def _project(self, x: Tensor, part: int) -> Tensor:
        """x @ W_part.T + b_part, W_part the part-th [E, E] block of the packed projection (a slice, no copy)."""
        e, g = self.embed_dim, x.graph
        w = self.param(g, "in_proj_weight")[part * e : (part + 1) * e]
        b = self.param(g, "in_proj_bias")[part * e : (part + 1) * e] if self.has_bias else None
        return split_heads(F.linear(x, w, b), self.num_heads)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        """key_padding_mask [batch, S] and a bool attn_mask [L, S] are True where attention is *blocked*
        (torch's convention for this module); a float attn_mask is added to the scores."""
        q, k, v = self._project(query, 0), self._project(key, 1), self._project(value, 2)
        allowed, bias = None, None
        if key_padding_mask is not None:
            b, s = key_padding_mask.shape
            allowed = F.logical_not(key_padding_mask.to(dt.bool_)).reshape(b, 1, 1, s)
        if attn_mask is not None and attn_mask.dtype == dt.bool_:
            allowed = combine_masks(allowed, F.logical_not(attn_mask))
        elif attn_mask is not None:
            bias = attn_mask
        if is_causal and attn_mask is None:  # torch's flag only hints that attn_mask is causal; it needs the mask
            raise ValueError("MultiheadAttention: is_causal=True needs attn_mask as well, as in torch")
        if bias is not None and allowed is not None:  # both kinds: turn the bool part into a bias as well
            bias = bias + F.log2(allowed.to(bias.dtype))  # log2(1) = 0 where allowed, -inf where not
            allowed = None
        mask = bias if bias is not None else allowed
        return self.out_proj(merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)))

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, bias={self.has_bias}"
