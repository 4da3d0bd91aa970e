"""The program that is ranked is the program that ships (DESIGN.md, issue 46): every candidate is ranked as it will
run, merges offered as alternatives, and the chosen one's source is the one its ranking generated and costed."""

from __future__ import annotations

import hashlib

import pytest

import luminal as lm
from luminal.compiler import backends
from luminal.compiler.analysis.cost import estimate_program
from luminal.compiler.cuda.program import launch_plan
from tests.compiler.metal.models import llama_prefill_bf16, paged_step

COMPILES = {
    "prefill-h100": (lambda: llama_prefill_bf16()[0], "h100"),
    "prefill-m2": (lambda: llama_prefill_bf16()[0], "m2"),
    "paged-step-h100": (paged_step, "h100"),
}


@pytest.fixture(scope="module", params=sorted(COMPILES))
def compiled(request):
    build, target = COMPILES[request.param]
    return lm.compile(build(), target, cache=False)


def _chosen(prog) -> dict:
    return next(row for row in prog.report["candidates"] if row["name"] == prog.report["choice"])


def test_the_shipped_source_is_the_ranked_winners(compiled):
    assert hashlib.sha256(compiled.source.encode()).hexdigest() == _chosen(compiled)["source_sha256"]


def test_the_ranked_cost_is_the_shipped_programs(compiled):
    kernels, target = compiled.kernels, compiled.target
    cost = estimate_program(kernels, target, together=backends.backend_for(target).launched_together(kernels))
    row = _chosen(compiled)
    assert (row["estimated_s"], row["launches"], row["resident_bytes"]) == (
        cost.seconds,
        cost.launches,
        cost.resident_bytes,
    )


def test_merging_sibling_gemms_is_a_ranked_alternative(compiled):
    names = {row["name"] for row in compiled.report["candidates"]}
    merged = {name for name in names if name.endswith("+siblings")}  # a layer's q, k and v GEMMs side by side
    assert merged and all(name.removesuffix("+siblings") in names for name in merged)


def test_a_paged_step_keeps_its_gemvs_over_gemms_of_weights_copied_at_load():
    prog = lm.compile(paged_step(), "h100", cache=False)
    rows = {row["name"]: row for row in prog.report["candidates"]}
    assert rows["search"]["load_s"] > 0  # its transposed weight copies, made at load, are charged there
    shapes = {launch.shape for launch in launch_plan(prog.kernels)}
    assert "gemvs" in shapes and not shapes & {"gemm", "mma", "cublas"}
