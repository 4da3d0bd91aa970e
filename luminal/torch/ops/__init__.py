"""The ATen translators, one module per family; importing this package fills `registry.ATEN`."""

from luminal.torch.ops import (  # noqa: F401
    creation,
    elementwise,
    fused,
    indexing,
    linalg,
    movement,
    nn,
    reduction,
    resize,
    sizes,
)
