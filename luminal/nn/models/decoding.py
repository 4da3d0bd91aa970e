"""What every decoder-only model shares: the positions and the attention mask of a step that may follow a
KV cache of `past` positions (a symbol in a decode-step graph, absent in a prefill graph)."""

from __future__ import annotations

from luminal import dtypes as dt
from luminal.hl import prim
from luminal.nn.attention import causal_mask, combine_masks, padding_mask
from luminal.nn.grouped_attention import KVCache
from luminal.symbolic import Dim
from luminal.tensor import Tensor
from luminal.view import ShapeError, format_shape, idx


def past_length(past: list[KVCache] | None) -> Dim:
    return 0 if not past else past[0][0].shape[2]


def step_positions(input_ids: Tensor, past: Dim) -> Tensor:
    """int64 [batch, seq]: past, past + 1, ... — the absolute positions of this step's tokens."""
    b, s = input_ids.shape
    return prim.iota(input_ids.graph, idx(1, s) + past, (b, s), dt.int64)


def step_mask(input_ids: Tensor, past: Dim, attention_mask: Tensor | None, window: int | None = None) -> Tensor:
    """bool, broadcastable to [batch, heads, seq, past + seq]: causal over the cache and this step, minus
    padding keys ([seq, past + seq] without an attention_mask, [batch, 1, seq, past + seq] with one).

    attention_mask, when given, covers every key ([batch, past + seq], 1 = token); `window` keeps only the
    last `window` keys of each query (Mistral's sliding window: query i sees key j when i - j < window).
    """
    seq = input_ids.shape[1]
    total = seq if past == 0 else past + seq
    allowed = causal_mask(input_ids.graph, seq, total)
    if window is not None:
        i, j = idx(0, seq), idx(1, total)
        recent = prim.iota(input_ids.graph, (i + (total - seq)) < j + window, (seq, total), dt.int32)
        allowed = combine_masks(allowed, prim.cast(recent, dt.bool_))
    if attention_mask is not None:
        if attention_mask.shape[1] != total:
            raise ShapeError(
                f"attention_mask {format_shape(attention_mask.shape)} must cover past + new positions ({total})"
            )
        return combine_masks(allowed, padding_mask(attention_mask))
    return allowed
