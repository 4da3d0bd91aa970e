"""The Metal runtime (PyObjC, Apple GPUs): not built yet; loading a program says so."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from luminal.runtime.registry import RuntimeUnavailable


class MetalRuntime:
    name = "metal"

    def load(self, program: Any, weights: Mapping[str, np.ndarray] | None = None):
        target = getattr(program, "target", "metal")
        raise RuntimeUnavailable(f"cannot run the {target} program here: no Metal runtime (needs macOS and PyObjC)")
