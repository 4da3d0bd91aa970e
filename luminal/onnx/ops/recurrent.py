"""RNN, GRU and LSTM, unrolled over the (concrete) sequence length: one step of matmuls per time step.

Weights are stacked per direction: W [dirs, gates * hidden, input], R [dirs, gates * hidden, hidden],
B [dirs, 2 * gates * hidden] (input bias, then recurrence bias). Gate order: GRU z, r, h; LSTM i, o, f, c
(peepholes P in the order i, o, f). With sequence_lens, a sequence's state stops at its end and its later
outputs are zero. The bidirectional case runs the reverse direction from each sequence's last step.
"""

from __future__ import annotations

import luminal.functional as F
from luminal import dtypes as dt
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import require_float
from luminal.onnx.registry import translates
from luminal.tensor import Tensor

_ACTIVATIONS = {"Sigmoid": F.sigmoid, "Tanh": F.tanh, "Relu": F.relu}
_COMMON = {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout"}


def _activations(ctx: NodeContext, defaults: list[str], dirs: int) -> list[list]:
    names = ctx.attr("activations", defaults * dirs)
    if "activation_alpha" in ctx.attrs or "activation_beta" in ctx.attrs:
        raise ctx.unsupported("activation_alpha/activation_beta are not supported")
    unknown = sorted(set(names) - set(_ACTIVATIONS))
    if unknown:
        raise ctx.unsupported(f"activations {unknown} are not supported ({', '.join(_ACTIVATIONS)} are)")
    per = len(defaults)
    return [[_ACTIVATIONS[n] for n in names[d * per : (d + 1) * per]] for d in range(dirs)]


class _Recurrence:
    """What every step of every direction reads: inputs per step, weights per direction, masks, clip."""

    def __init__(self, ctx: NodeContext, gates: int) -> None:
        x = require_float(ctx, ctx.x(0))
        self.layout = int(ctx.attr("layout", 0))
        self.x = x.transpose(0, 1) if self.layout else x  # [seq, batch, input]
        self.steps, self.batch = self.x.shape[0], self.x.shape[1]
        if not isinstance(self.steps, int):
            raise ctx.unsupported(f"a symbolic sequence length ({self.steps}) is not supported (the loop is unrolled)")
        self.hidden = int(ctx.attr("hidden_size"))
        direction = ctx.attr("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ctx.error(f"direction must be forward, reverse or bidirectional, got {direction!r}")
        self.directions = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        self.w, self.r = ctx.x(1), ctx.x(2)
        n = gates * self.hidden
        self.b = ctx.x(3) if ctx.has(3) else None
        self.wb = [self.b[d, :n] if self.b is not None else None for d in range(len(self.directions))]
        self.rb = [self.b[d, n:] if self.b is not None else None for d in range(len(self.directions))]
        self.lens = F.cast(ctx.x(4), dt.int64) if ctx.has(4) else None
        self.clip = ctx.attr("clip")
        self.h0 = ctx.x(5) if ctx.has(5) else None

    def initial(self, t: Tensor | None, d: int) -> Tensor:
        return t[d] if t is not None else F.zeros_like(self.x[0, :, :1]).expand(self.batch, self.hidden)

    def order(self, d: int) -> list[int]:
        return list(range(self.steps)) if self.directions[d] == "forward" else list(range(self.steps))[::-1]

    def project(self, t: int, d: int) -> Tensor:
        """X_t W^T + Wb: the input's part of every gate at step t."""
        out = F.matmul(self.x[t], self.w[d].transpose(0, 1))
        return F.add(out, self.wb[d]) if self.wb[d] is not None else out

    def recur(self, h: Tensor, d: int, rows: slice | None = None) -> Tensor:
        """H R^T + Rb (only the gate rows `rows`, when given)."""
        r, rb = self.r[d], self.rb[d]
        if rows is not None:
            r, rb = r[rows], rb[rows] if rb is not None else None
        out = F.matmul(h, r.transpose(0, 1))
        return F.add(out, rb) if rb is not None else out

    def clipped(self, t: Tensor) -> Tensor:
        return F.clamp(t, -self.clip, self.clip) if self.clip is not None else t

    def alive(self, t: int) -> Tensor | None:
        """[batch, 1] bool: whether step t lies inside each sequence (None when every sequence is full)."""
        if self.lens is None:
            return None
        return F.unsqueeze(F.gt(self.lens, t), 1)

    def keep(self, t: int, new: Tensor, old: Tensor) -> tuple[Tensor, Tensor]:
        """(the state after step t, the output of step t): past a sequence's end, the old state and zeros."""
        alive = self.alive(t)
        if alive is None:
            return new, new
        return F.where(alive, new, old), F.where(alive, new, F.zeros_like(new))

    def outputs(self, per_direction: list[list[Tensor]], finals: list[Tensor]) -> tuple[Tensor, Tensor]:
        y = F.stack([F.stack(steps, 0) for steps in per_direction], 1)  # [seq, dirs, batch, hidden]
        y_h = F.stack(finals, 0)
        if self.layout:
            return y.permute(2, 0, 1, 3), y_h.transpose(0, 1)
        return y, y_h


def _run(ctx: NodeContext, rec: _Recurrence, step) -> list:
    """Unroll every direction: `step(t, d, state) -> (new state..., output)`; states keep their shape."""
    ys, finals = [], []
    for d in range(len(rec.directions)):
        if rec.lens is not None and rec.directions[d] == "reverse":
            raise ctx.unsupported("sequence_lens with a reverse direction is not supported")
        state = None
        outs: list[Tensor | None] = [None] * rec.steps
        for t in rec.order(d):
            state, outs[t] = step(t, d, state)
        ys.append(outs)
        finals.append(state)
    return ys, finals


@translates("RNN", attrs=_COMMON)
def rnn(ctx: NodeContext) -> tuple[Tensor, Tensor]:
    rec = _Recurrence(ctx, 1)
    acts = _activations(ctx, ["Tanh"], len(rec.directions))

    def step(t, d, h):
        h = rec.initial(rec.h0, d) if h is None else h
        new = acts[d][0](rec.clipped(F.add(rec.project(t, d), rec.recur(h, d))))
        return rec.keep(t, new, h)

    ys, finals = _run(ctx, rec, step)
    return rec.outputs(ys, finals)


@translates("GRU", attrs=_COMMON | {"linear_before_reset"})
def gru(ctx: NodeContext) -> tuple[Tensor, Tensor]:
    rec = _Recurrence(ctx, 3)
    acts = _activations(ctx, ["Sigmoid", "Tanh"], len(rec.directions))
    n = rec.hidden
    before = int(ctx.attr("linear_before_reset", 0))

    def step(t, d, h):
        h = rec.initial(rec.h0, d) if h is None else h
        f, g = acts[d]
        xp = rec.project(t, d)
        hz_r = rec.recur(h, d, slice(0, 2 * n))
        z = f(rec.clipped(F.add(xp[:, :n], hz_r[:, :n])))
        r = f(rec.clipped(F.add(xp[:, n : 2 * n], hz_r[:, n:])))
        if before:  # r (H Rh^T + Rbh)
            hh = F.mul(r, rec.recur(h, d, slice(2 * n, 3 * n)))
        else:  # (r H) Rh^T + Rbh
            hh = rec.recur(F.mul(r, h), d, slice(2 * n, 3 * n))
        candidate = g(rec.clipped(F.add(xp[:, 2 * n :], hh)))
        new = F.add(F.mul(F.sub(1.0, z), candidate), F.mul(z, h))  # (1 - z) h~ + z H
        return rec.keep(t, new, h)

    ys, finals = _run(ctx, rec, step)
    return rec.outputs(ys, finals)


@translates("LSTM", attrs=_COMMON | {"input_forget"})
def lstm(ctx: NodeContext) -> tuple[Tensor, Tensor, Tensor]:
    rec = _Recurrence(ctx, 4)
    if ctx.attr("input_forget", 0):
        raise ctx.unsupported("input_forget=1 is not supported")
    acts = _activations(ctx, ["Sigmoid", "Tanh", "Tanh"], len(rec.directions))
    n = rec.hidden
    c0 = ctx.x(6) if ctx.has(6) else None
    peep = ctx.x(7) if ctx.has(7) else None
    cells: dict[int, Tensor] = {}

    def step(t, d, h):
        h = rec.initial(rec.h0, d) if h is None else h
        c = cells.get(d, rec.initial(c0, d))
        f, g, act_h = acts[d]
        gates = F.add(rec.project(t, d), rec.recur(h, d))
        pi, po, pf = (peep[d, k * n : (k + 1) * n] for k in range(3)) if peep is not None else (None,) * 3

        def gate(k, p, cell):
            pre = gates[:, k * n : (k + 1) * n]
            return rec.clipped(F.add(pre, F.mul(p, cell)) if p is not None else pre)

        i = f(gate(0, pi, c))
        forget = f(gate(2, pf, c))
        new_c = F.add(F.mul(forget, c), F.mul(i, g(gate(3, None, c))))
        o = f(gate(1, po, new_c))
        new_h = F.mul(o, act_h(new_c))
        cells[d], _ = rec.keep(t, new_c, c)
        return rec.keep(t, new_h, h)

    ys, finals = _run(ctx, rec, step)
    y, y_h = rec.outputs(ys, finals)
    y_c = F.stack([cells[d] for d in range(len(rec.directions))], 0)
    return y, y_h, (y_c.transpose(0, 1) if rec.layout else y_c)
