"""What every decoder-only model shares: the positions and the attention mask of a step that may follow a
KV cache of `past` positions (a symbol in a decode-step graph, absent in a prefill graph).

A sliding window is measured by key index unless the keys' positions are given: a paged cache's keys are its
gathered blocks (masked past the row's length) followed by the new keys, so a new key's index is not its
position (luminal/nn/models/paged_decoding.py)."""

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


def step_mask(
    input_ids: Tensor,
    past: Dim,
    attention_mask: Tensor | None,
    window: int | None = None,
    positions: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """bool, broadcastable to [batch, heads, seq, past + seq]: causal over the cache and this step, minus
    padding keys ([seq, past + seq] without an attention_mask, [batch, 1, seq, past + seq] with one).

    attention_mask, when given, covers every key ([batch, past + seq], 1 = token); `window` keeps only the
    last `window` keys of each query (Mistral's sliding window: query i sees key j when i - j < window), i and
    j being indexes, or with `positions` (the queries' [batch, seq] and the keys' [batch, past + seq], int64)
    the positions there.
    """
    seq = input_ids.shape[1]
    total = seq if past == 0 else past + seq
    allowed = causal_mask(input_ids.graph, seq, total)
    if window is not None and positions is None:
        i, j = idx(0, seq), idx(1, total)
        recent = prim.iota(input_ids.graph, (i + (total - seq)) < j + window, (seq, total), dt.int32)
        allowed = combine_masks(allowed, prim.cast(recent, dt.bool_))
    elif window is not None:
        allowed = combine_masks(allowed, _within(*positions, window))
    if attention_mask is not None:
        if attention_mask.shape[1] != total:
            raise ShapeError(
                f"attention_mask {format_shape(attention_mask.shape)} must cover past + new positions ({total})"
            )
        return combine_masks(allowed, padding_mask(attention_mask))
    return allowed


def _within(queries: Tensor, keys: Tensor, window: int) -> Tensor:
    """bool [batch, 1, seq, keys]: the query at position p sees the key at position q when p - q < window."""
    (b, s), n = queries.shape, keys.shape[1]
    return queries.reshape(b, 1, s, 1) - keys.reshape(b, 1, 1, n) < window


class WindowMasks:
    """A step's masks by sliding window (None: full attention), each made when a layer first asks for it and shared
    by the layers with that window. key_positions [batch, past + seq]: every key's position, which the windows
    are measured by (a paged cache's keys are not in position order); None: by index."""

    def __init__(
        self,
        input_ids: Tensor,
        past: Dim,
        attention_mask: Tensor | None,
        positions: Tensor,
        key_positions: Tensor | None = None,
    ) -> None:
        self.input_ids, self.past, self.attention_mask = input_ids, past, attention_mask
        self.by_position = None if key_positions is None else (positions, key_positions)
        self._made: dict[int | None, Tensor] = {}

    def __call__(self, window: int | None) -> Tensor:
        if window not in self._made:
            self._made[window] = step_mask(self.input_ids, self.past, self.attention_mask, window, self.by_position)
        return self._made[window]
