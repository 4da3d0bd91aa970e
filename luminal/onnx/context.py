"""What a translator sees of one ONNX node: its inputs as luminal tensors or known values, its attributes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper

from luminal.onnx.errors import OnnxDynamicInputError, OnnxImportError, OnnxUnsupportedError
from luminal.onnx.types import tensor_to_array
from luminal.symbolic import Expr
from luminal.tensor import Tensor

if TYPE_CHECKING:
    from luminal.onnx.scope import Scope


def read_attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """Attribute values as Python values: strings decoded, tensors as arrays, graphs as GraphProtos."""
    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.ref_attr_name:
            raise OnnxImportError(f"{node.op_type}: attribute {a.name!r} refers to a function attribute")
        if a.type == onnx.AttributeProto.GRAPHS:
            raise OnnxUnsupportedError(f"{node.op_type}: attribute {a.name!r} holds several graphs", (node.op_type,))
        value = helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, onnx.TensorProto):
            value = tensor_to_array(value, f"{node.op_type} attribute {a.name!r}")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", "replace") for v in value]
        out[a.name] = value
    return out


class NodeContext:
    def __init__(self, node: onnx.NodeProto, opset: int, scope: Scope, attrs: dict[str, Any]) -> None:
        self.node = node
        self.opset = opset
        self.scope = scope
        self.attrs = attrs

    @property
    def op_type(self) -> str:
        return self.node.op_type

    @property
    def graph(self):
        return self.scope.graph

    # ---- inputs --------------------------------------------------------------------------------------
    @property
    def num_inputs(self) -> int:
        return len(self.node.input)

    def has(self, i: int) -> bool:
        """Whether optional input i is given (ONNX leaves a missing one out, or names it "")."""
        return i < len(self.node.input) and self.node.input[i] != ""

    def x(self, i: int) -> Tensor:
        """Input i as a luminal tensor."""
        if not self.has(i):
            raise OnnxImportError(f"{self.op_type}: input {i} is required")
        return self.scope.tensor(self.node.input[i])

    def inputs(self) -> list[Tensor]:
        return [self.x(i) for i in range(self.num_inputs) if self.has(i)]

    def const(self, i: int, what: str) -> np.ndarray:
        """Input i as a value known at import; `what` names its role for the error when it is not known."""
        name = self.node.input[i] if self.has(i) else ""
        value = self.scope.const(name) if name else None
        if value is None:
            if not name:
                raise OnnxImportError(f"{self.op_type}: input {i} ({what}) is required")
            sources = self.scope.sources(name)
            raise OnnxDynamicInputError(
                f"{self.op_type} (node {self.node.name or '?'}): input {i} ({what}, {name!r}) must be known when "
                f"the model is imported (an initializer or Constant), but it depends on graph input(s) "
                f"{sorted(sources)}; a luminal graph is static",
                tuple(sorted(sources)),
            )
        return value

    def ints(self, i: int, what: str) -> list:
        """Input i as a list of ints, or of luminal Exprs where it holds symbolic shape arithmetic."""
        return [v if isinstance(v, Expr) else int(v) for v in np.asarray(self.const(i, what)).reshape(-1)]

    def is_const(self, i: int) -> bool:
        return self.has(i) and self.scope.const(self.node.input[i]) is not None

    # ---- attributes and outputs ----------------------------------------------------------------------
    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    @property
    def num_outputs(self) -> int:
        return len(self.node.output)

    def wants(self, k: int) -> bool:
        """Whether output k is used (ONNX leaves unused optional outputs out or names them "")."""
        return k < len(self.node.output) and self.node.output[k] != ""

    def subgraph(self, name: str, inputs: list[Any]) -> list[Any]:
        """Translate the graph attribute `name` with its inputs bound to `inputs`; its outputs' values."""
        from luminal.onnx.importer import run_subgraph

        return run_subgraph(self.attrs[name], self.scope, self.opset, inputs)

    def unsupported(self, message: str) -> OnnxUnsupportedError:
        """The error for a case of this operator that is not translated (raise it)."""
        return OnnxUnsupportedError(f"{self.op_type}: {message}", (self.op_type,))

    def error(self, message: str) -> OnnxImportError:
        """The error for a node that breaks the ONNX spec (raise it)."""
        return OnnxImportError(f"{self.op_type} (node {self.node.name or '?'}): {message}")
