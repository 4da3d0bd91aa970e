"""What the importer raises. Every message names the ONNX operator (and input or attribute) concerned."""

from __future__ import annotations


class OnnxImportError(ValueError):
    """The model cannot be imported: not ONNX, malformed, or using something the importer does not translate."""


class OnnxUnsupportedError(OnnxImportError):
    """The model uses operators, attributes, cases or element types that luminal does not translate.

    `operators` lists the unsupported operator types (all that the model uses, found before any is translated).
    """

    def __init__(self, message: str, operators: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.operators = operators


class OnnxDynamicInputError(OnnxImportError):
    """An input that decides a shape (Reshape's shape, Slice's starts...) is not known when the model is imported.

    A luminal graph is static, so such inputs must come from initializers or Constant nodes; `inputs` names the
    graph inputs the value was computed from, which `load(..., constant_inputs={name: array})` can fix.
    """

    def __init__(self, message: str, inputs: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.inputs = inputs
