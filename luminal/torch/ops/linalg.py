"""Matrix products."""

from __future__ import annotations

import luminal.functional as F
from luminal.torch.call import Call
from luminal.torch.registry import translates


@translates("aten.mm", "aten.bmm", "aten.matmul")
def matmul(c: Call):
    return F.matmul(c["self"], c["mat2"] if "mat2" in c.args else c["other"])


@translates("aten.addmm")
def addmm(c: Call):
    return F.addmm(c["self"], c["mat1"], c["mat2"], beta=c["beta"], alpha=c["alpha"])


@translates("aten.baddbmm")
def baddbmm(c: Call):
    return F.baddbmm(c["self"], c["batch1"], c["batch2"], beta=c["beta"], alpha=c["alpha"])


@translates("aten.linear")
def linear(c: Call):
    return F.linear(c["input"], c["weight"], c.get("bias"))


@translates("aten.dot", "aten.mv")
def dot(c: Call):
    return F.matmul(c["self"], c["tensor"] if "tensor" in c.args else c["vec"])
