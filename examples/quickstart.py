"""`make run` (until the platform lands): build a small model, save it to .lgraph, load it back, run both.

Prints each step, so a reader sees the whole user path of the core: graph -> file -> graph -> results.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

import luminal as lm
import luminal.functional as F


def build_classifier(hidden: int = 64, classes: int = 10) -> lm.Graph:
    g = lm.Graph()
    x = g.input("x", (lm.sym("batch", max=1024), 32))
    h = F.gelu(F.linear(x, g.weight("fc1.weight", (hidden, 32)), g.weight("fc1.bias", (hidden,))))
    h = F.layer_norm(h, (hidden,), g.weight("norm.weight", (hidden,)), g.weight("norm.bias", (hidden,)))
    logits = F.linear(h, g.weight("fc2.weight", (classes, hidden)), g.weight("fc2.bias", (classes,)))
    logits.softmax(-1).output("probs")
    rng = np.random.default_rng(0)
    g.bind(
        {
            "fc1.weight": (rng.standard_normal((hidden, 32)) * 0.2).astype(np.float32),
            "fc1.bias": np.zeros(hidden, np.float32),
            "norm.weight": np.ones(hidden, np.float32),
            "norm.bias": np.zeros(hidden, np.float32),
            "fc2.weight": (rng.standard_normal((classes, hidden)) * 0.2).astype(np.float32),
            "fc2.bias": np.zeros(classes, np.float32),
        }
    )
    return g


def main() -> None:
    g = build_classifier()
    print(f"built   {g}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "classifier.lgraph"
        lm.save(g, path)
        print(f"saved   {path.name}: {path.stat().st_size:,} bytes")
        loaded = lm.load(path)
        print(f"loaded  {loaded}")
    xs = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    start = time.perf_counter()
    before = lm.run(g, {"x": xs})["probs"]
    reference_ms = (time.perf_counter() - start) * 1e3
    prog = lm.compile(loaded, target="cpu")
    prog.run({"x": xs})  # the first run builds (or loads from the cache) the generated C library
    start = time.perf_counter()
    after = prog.run({"x": xs})["probs"]
    compiled_ms = (time.perf_counter() - start) * 1e3
    np.testing.assert_allclose(after, before, rtol=1e-5, err_msg="the loaded, compiled graph computes something else")
    print(f"ran     batch of {len(xs)}: reference interpreter {reference_ms:.2f} ms, compiled cpu {compiled_ms:.2f} ms")
    print(f"        {prog}; outputs match the reference after the round trip")
    for row, p in enumerate(after):
        print(f"  sample {row}: class {int(p.argmax())} with p={p.max():.3f}")


if __name__ == "__main__":
    main()
