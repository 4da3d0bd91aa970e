"""The ATen translators, one module per family; importing this package fills `registry.ATEN`."""

from luminal.torch.ops import creation, elementwise, indexing, linalg, movement, nn, reduction, sizes  # noqa: F401
