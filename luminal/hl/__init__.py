"""High-level ops: compositions of the primitives, bound as Tensor methods and exported by
`luminal.functional`. Each module lists its tensor methods in `METHODS` (and operators in `DUNDERS`)."""

from luminal.hl import elementwise, movement, reduction

METHOD_MODULES = (elementwise, reduction, movement)
