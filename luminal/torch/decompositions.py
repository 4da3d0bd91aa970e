"""Which ATen operators torch decomposes before translation: torch.export's core-ATen table, except
operators luminal translates whole because it has the same op already (scaled_dot_product_attention: its
decomposition also trips a view check in torch 2.13 on GPT-2's attention output)."""

from __future__ import annotations

from typing import Any

import torch

KEPT_WHOLE = ("scaled_dot_product_attention.default",)


def decomposition_table() -> Any:
    """The table for `ExportedProgram.run_decompositions` (a torch CustomDecompTable)."""
    table = torch.export.default_decompositions()
    for name in KEPT_WHOLE:
        packet, overload = name.split(".")
        table.pop(getattr(getattr(torch.ops.aten, packet), overload), None)
    return table


def decomposition_dict() -> dict:
    """The same table as a plain dict, for AOT autograd (the torch.compile backend)."""
    return dict(decomposition_table().materialize())
