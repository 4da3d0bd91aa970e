"""The run plan in the artifact (compiler/storage/run_plan.py, plan_json.py): it survives a save and load for
every backend, a load reads it instead of planning (and regenerates nothing unless verify=True), and a
hostile or missing plan is refused with the defect named."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.compiler import backends
from luminal.compiler.artifact import ArtifactError, load_program, program_to_bytes
from luminal.compiler.storage.run_plan import RunPlan
from tests.compiler.test_artifact import _edit, _json_edit, block
from tests.compiler.test_in_place_scatter import _pool_graph


def small() -> lm.Graph:
    g = lm.Graph()
    x = g.input("x", (lm.sym("b", max=4), 16, 32))
    F.relu(F.linear(x, g.weight("w", (32, 32)))).output("y")
    g.bind({"w": np.full((32, 32), 0.5, np.float32)})
    return g


@pytest.mark.parametrize("target", ["cpu", "h100", "m2"])
def test_the_plan_survives_a_save_and_load(target):
    prog = lm.compile(block()[0], target, cache=False)
    back = load_program(program_to_bytes(prog))
    assert isinstance(back.plan, RunPlan) and back.plan == prog.plan == backends.run_plan(prog.kernels, target)
    assert back.source == prog.source
    assert load_program(program_to_bytes(prog), verify=True).plan == prog.plan


@pytest.mark.parametrize("target", ["cpu", "h100", "m2"])
def test_a_donated_input_written_in_place_is_in_the_plan(target):
    prog = lm.compile(_pool_graph(), target, cache=False)
    assert prog.plan.written_inputs  # the scatter writes the pool where the caller holds it
    assert load_program(program_to_bytes(prog)).plan == prog.plan


def test_a_load_plans_nothing_and_generates_nothing(monkeypatch):
    blob = program_to_bytes(lm.compile(small(), "h100", cache=False))

    def refuse(*args):
        raise AssertionError("the load planned or generated again")

    monkeypatch.setattr("luminal.compiler.artifact.program_source", refuse)
    monkeypatch.setattr("luminal.compiler.artifact.run_plan", refuse)
    monkeypatch.setattr(backends, "run_plan", refuse)
    assert load_program(blob).plan.launches
    with pytest.raises(AssertionError, match="planned or generated"):
        load_program(blob, verify=True)


@pytest.fixture(scope="module")
def gpu_blob() -> bytes:
    return program_to_bytes(lm.compile(small(), "h100", cache=False))


def _plan(edit):
    return _json_edit(lambda d: edit(d["plan"]))


@pytest.mark.parametrize(
    "change,message",
    [
        (_json_edit(lambda d: d.pop("plan")), "no run plan"),
        (_plan(lambda p: p["launches"][0].update(kernel="k(){system(0);}")), "identifier"),
        (_plan(lambda p: p["launches"][0].update(buffers=["nope"])), "declared buffer"),
        (_plan(lambda p: p["launches"][0].update(grid=["var", "evil", 0, 10])), "not the program's"),
        (_plan(lambda p: p["launches"][0].update(block=10**6)), "block"),
        (_plan(lambda p: p["launches"][0].update(writes=99)), "writes"),
        (_plan(lambda p: p.update(together=[["k999"]])), "not kernels"),
        (_plan(lambda p: p.update(written_inputs=[["nope", "x"]])), "written_inputs"),
        (_plan(lambda p: p.update(packed_only=[["w"]])), "packed_only"),
        (_plan(lambda p: p.pop("at_load")), "wrong keys"),
    ],
)
def test_a_hostile_plan_is_refused(gpu_blob, change, message):
    with pytest.raises(ArtifactError, match=message):
        load_program(_edit(gpu_blob, "kernels.json", change))


def test_a_plan_that_is_not_the_compilers_is_refused_with_verify(gpu_blob):
    narrowed = _edit(gpu_blob, "kernels.json", _plan(lambda p: p["launches"][0].update(block=32)))
    assert load_program(narrowed).plan.launches[0].block == 32  # taken as stored, as the source is
    with pytest.raises(ArtifactError, match="run plan"):
        load_program(narrowed, verify=True)


def test_format_1_is_refused_naming_its_version(gpu_blob):
    old = _edit(gpu_blob, "manifest.json", _json_edit(lambda m: m.update(format_version=1)))
    with pytest.raises(ArtifactError, match="format version 1; this luminal reads 2"):
        load_program(old)
