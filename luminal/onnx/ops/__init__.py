"""The translators, one module per operator family; importing this package registers them all."""

from luminal.onnx.ops import (  # noqa: F401
    activation,
    attention,
    bitwise,
    control,
    creation,
    elementwise,
    indexing,
    logic,
    losses,
    nn,
    normalization,
    quantization,
    recurrent,
    reduction,
    resize,
    sampling,
    selection,
    shape,
    spectral,
    training,
)
