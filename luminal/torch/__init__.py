"""luminal.torch: PyTorch modules as luminal graphs.

    import luminal as lm, luminal.torch
    graph = luminal.torch.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    lm.save(graph, "model.lgraph")                         # weights under their state-dict names
    fast = torch.compile(model, backend=luminal.torch.backend)   # inference: C compiled by lm.compile

Both translate torch's ATen graph (core ATen after decomposition) into luminal's high-level ops, never new
primitives. Anything not translated raises `TorchUnsupportedError` naming every such operator at once.
"""

try:
    import torch  # noqa: F401
except ImportError as e:  # not a dependency of luminal itself: say how to get it
    raise ImportError(
        "luminal.torch needs PyTorch 2.6 or newer (torch.export's decomposition tables): pip install torch"
    ) from e

from luminal.torch.dynamo_backend import backend
from luminal.torch.errors import TorchImportError, TorchUnsupportedError
from luminal.torch.exporter import export, from_exported_program
from luminal.torch.registry import supported_operators

__all__ = [
    "TorchImportError",
    "TorchUnsupportedError",
    "backend",
    "export",
    "from_exported_program",
    "supported_operators",
]
