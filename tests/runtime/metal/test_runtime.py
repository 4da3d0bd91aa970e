"""The Metal runtime: on this machine loading says plainly what is missing; its own logic (pipelines, resident
weights, arenas, one command buffer per forward pass, dims through setBytes, the status flag) runs against a
stand-in for PyObjC's Metal module whose dispatches run the generated MSL through the Metal shim (fake_metal.py),
and must compute what the reference interpreter computes."""

import importlib.util
import sys
import types

import numpy as np
import pytest

import luminal as lm
from luminal.runtime import metal as metal_runtime
from luminal.runtime.cuda.layout import launches_at
from luminal.runtime.metal.executable import MetalError
from luminal.runtime.registry import RuntimeUnavailable, runtime_for
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import CASES, MODELS
from tests.compiler.metal.models import MODELS as METAL_MODELS
from tests.runtime.metal import fake_metal

needs_gxx = pytest.mark.needs("g++")
PROGRAMS = {**CASES, **MODELS, **METAL_MODELS}


def load(case: str, **device):
    g, feed = PROGRAMS[case]()
    program = lm.compile(g, "m2")
    fake_metal.use(program, **device)
    return g, feed, metal_runtime.MetalRuntime().load(program, api=fake_metal)


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS the runtime may well be available")
def test_loading_here_says_what_is_missing():
    g, feed = CASES["elementwise"]()
    program = lm.compile(g, "m2")
    assert isinstance(runtime_for("metal"), metal_runtime.MetalRuntime)  # importing needs no PyObjC
    with pytest.raises(RuntimeUnavailable, match="program here: Metal needs macOS and an Apple GPU; this is"):
        program.run(feed)


def test_a_mac_without_pyobjc_or_a_device_is_named(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "Metal" else found(name, *a))
    assert "PyObjC's Metal framework bindings are not installed" in metal_runtime.missing()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "Metal" else found(name, *a))
    monkeypatch.setitem(sys.modules, "Metal", types.SimpleNamespace(MTLCreateSystemDefaultDevice=lambda: None))
    assert metal_runtime.missing() == "no Metal device: MTLCreateSystemDefaultDevice() returned none"


@needs_gxx
@pytest.mark.parametrize("case", ["where_casts", "gather_scatter", "softmax_layernorm", "llama_decode_bf16"])
def test_matches_the_reference(case):
    g, feed, exe = load(case)
    assert_matches(exe.run(feed), lm.run(g, feed))


@needs_gxx
def test_one_command_buffer_per_forward_pass():
    g, feed, exe = load("gpt2")
    device = fake_metal.current
    made = len(device.buffers)  # the weights and the status flag, at load
    assert exe.weight_uploads == len(g.weights) and made == exe.weight_uploads + 1
    (library,) = device.libraries
    assert library.options.fast_math is False and library.options.language == fake_metal.MTLLanguageVersion3_1
    for seq in (6, 5):  # two dims of one bucket (8): one arena, and no weight uploaded again
        step = {name: value[:, :seq] for name, value in feed.items()}
        assert_matches(exe.run(step), lm.run(g, step))
    assert len(device.buffers) == made + 1  # the bucket's arena
    assert len(device.command_buffers) == 2
    for commands, seq in zip(device.command_buffers, (6, 5)):
        (encoder,) = commands.encoders  # every kernel of the pass in one encoder of one command buffer
        expected = launches_at(exe.plan, {"seq": seq})
        assert [(d.pipeline.function.name, d.groups.width, d.threads.width) for d in encoder.dispatches] == [
            (launch.kernel, groups, launch.block) for launch, groups in expected
        ]
        for dispatch, (launch, _) in zip(encoder.dispatches, expected):
            dims = dispatch.bindings[len(launch.buffers)]  # D: the live dims, copied when encoded
            assert dims.view(np.int64).tolist() == [seq]


@needs_gxx
def test_an_index_out_of_range_is_reported():
    _, feed, exe = load("gather_scatter")
    feed["ids"] = feed["ids"].copy()
    feed["ids"][3] = 20
    with pytest.raises(IndexError, match="out of range"):
        exe.run(feed)
    feed["ids"][3] = 2  # the flag is cleared for the next pass
    exe.run(feed)


@needs_gxx
def test_metal_refusals_name_the_problem():
    with pytest.raises(MetalError, match="needs threadgroups of 256 threads; this device allows it 128"):
        load("softmax_layernorm", max_threads=128)
    with pytest.raises(MetalError, match="compiling the MSL failed: program_source:3: error"):
        load("elementwise", fail_compile="program_source:3: error")
