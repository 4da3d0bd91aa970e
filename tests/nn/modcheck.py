"""The helper that checks a luminal.nn module against the torch.nn module holding the same weights.

    check_module(nn.Linear(8, 5), torch.nn.Linear(8, 5), [(2, 3, 8)])

randomises the torch module's parameters and buffers, binds its state dict into the luminal graph by name
(so a misnamed or misshaped parameter fails the check), runs both on the same inputs and compares.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

import luminal as lm

SKIPPED_BUFFERS = ("num_batches_tracked",)  # torch's BatchNorm step counter: training-only, not declared


def state_dict_numpy(module: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def randomize(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every float parameter and saved buffer set to N(0, 0.5) (running variances to positive values).

    Buffers outside the state dict (rotary inv_freq tables and the like) are derived from the config and kept.
    """
    gen = torch.Generator().manual_seed(seed)
    saved = set(module.state_dict())
    with torch.no_grad():
        for name, t in [*module.named_parameters(), *module.named_buffers()]:
            if t.is_floating_point() and name in saved:
                t.copy_(torch.randn(t.shape, generator=gen) * 0.5)
                if name.endswith("running_var"):
                    t.abs_().add_(0.1)
    return module.eval()


def check_module(
    lm_module: Any,
    torch_module: torch.nn.Module,
    shapes: Sequence[Sequence[Any]] = (),
    *,
    inputs: Sequence[np.ndarray] | None = None,
    lm_call: Callable | None = None,
    torch_call: Callable | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-4,
    seed: int = 0,
) -> float:
    """Compare outputs (float32: rtol 1e-5, atol 1e-4); returns the max absolute error. Input shapes may hold
    symbols (lm.sym) with a concrete size beside them as (symbol, size)."""
    randomize(torch_module, seed)
    rng = np.random.default_rng(seed)
    if inputs is None:
        inputs = [rng.standard_normal([d[1] if isinstance(d, tuple) else d for d in s]).astype(np.float32)
                  for s in shapes]  # fmt: skip
        decl = [[d[0] if isinstance(d, tuple) else d for d in s] for s in shapes]
    else:
        decl = [a.shape for a in inputs]
    g = lm.Graph()
    xs = [g.input(f"x{k}", d, dtype=lm.dtypes.dtype_of(a.dtype)) for k, (a, d) in enumerate(zip(inputs, decl))]
    out = (lm_call or (lambda m, *t: m(*t)))(lm_module, *xs)
    out.output("y")
    weights = {k: v for k, v in state_dict_numpy(torch_module).items() if not k.endswith(SKIPPED_BUFFERS)}
    assert sorted(g.weights) == sorted(weights), f"weight names differ: {sorted(g.weights)} vs {sorted(weights)}"
    g.bind(weights, strict=True)
    got = lm.run(g, {f"x{k}": a for k, a in enumerate(inputs)})["y"]
    with torch.no_grad():
        want = (torch_call or (lambda m, *t: m(*t)))(torch_module, *[torch.from_numpy(a) for a in inputs])
    want = want.numpy()
    assert got.shape == want.shape, f"shape {got.shape}, torch gives {want.shape}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return float(np.abs(got - want).max())
