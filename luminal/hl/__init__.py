"""High-level ops: compositions of the primitives, bound as Tensor methods and exported by
`luminal.functional`. Each module lists its tensor methods in `METHODS` (and operators in `DUNDERS`);
`__all__` is what `luminal.functional` exports."""

from luminal.hl import (
    activation,
    attention,
    combine,
    comparison,
    conv,
    creation,
    elementwise,
    indexing,
    linalg,
    movement,
    normalization,
    reduction,
    rounding,
)

METHOD_MODULES = (
    elementwise,
    rounding,
    activation,
    comparison,
    reduction,
    movement,
    combine,
    indexing,
    creation,
    linalg,
    normalization,
    conv,
    attention,
)
