"""luminal.onnx: import ONNX models as luminal graphs.

    import luminal as lm, luminal.onnx
    graph = luminal.onnx.load("model.onnx")    # a path, bytes or onnx.ModelProto
    lm.run(graph, {"input": x})                # outputs under their ONNX names

ONNX operators become compositions of luminal's high-level ops (never new primitives); initializers become
weights, graph inputs luminal inputs with `dim_param` dims as symbols. Anything not translated raises
`OnnxUnsupportedError` naming it. `python -m luminal.onnx.coverage` runs ONNX's node test cases.
"""

try:
    import onnx  # noqa: F401
except ImportError as e:  # an optional dependency: say how to get it
    raise ImportError("luminal.onnx needs the onnx package: pip install 'luminal-cloud[onnx]'") from e

from luminal.onnx.errors import OnnxDynamicInputError, OnnxImportError, OnnxUnsupportedError
from luminal.onnx.importer import load
from luminal.onnx.registry import supported_operators

__all__ = ["OnnxDynamicInputError", "OnnxImportError", "OnnxUnsupportedError", "load", "supported_operators"]
