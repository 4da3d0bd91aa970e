"""`luminal predict` against a deployed model (JSON and binary tensors, printed or saved as .npy) and `luminal
compile` on a local file; the expected values come from the reference interpreter, never from the server."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import luminal as lm
from luminal.cli.main import app
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, tiny_graph, upload

runner = CliRunner()
X = np.arange(8, dtype=np.float32).reshape(2, 4) / 8


def luminal(server, *args: str):
    return runner.invoke(app, list(args), env={"LUMINAL_URL": server.url, "LUMINAL_API_KEY": BOOTSTRAP_KEY})


@pytest.fixture
def deployed(server, model_bytes):
    c = server.client()
    upload(c, "tiny", model_bytes)
    assert deploy_and_wait(c, "tiny")["status"] == "ready"
    return server


@pytest.mark.parametrize("binary", [False, True])
def test_predict_saves_what_the_model_computes(deployed, tmp_path: Path, binary):
    np.save(tmp_path / "x.npy", X)
    args = ["predict", "tiny", "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "out")]
    result = luminal(deployed, *args, *(["--binary"] if binary else []))
    assert result.exit_code == 0, result.output
    saved = np.load(tmp_path / "out" / "probs.npy")
    want = lm.run(tiny_graph(), {"x": X})["probs"]
    assert saved.dtype == np.float32 and saved.shape == (2, 3)
    np.testing.assert_allclose(saved, want, rtol=1e-5)


def test_predict_prints_name_type_shape_and_values(deployed):
    result = luminal(deployed, "predict", "tiny", "--version", "1", "--input", f"x={json.dumps(X.tolist())}")
    assert result.exit_code == 0, result.output
    header, *values = result.stdout.strip().splitlines()
    assert header == "probs FP32 [2, 3]"
    printed = np.array(json.loads(" ".join(values)))  # np.array2string with ", " separators is JSON here
    np.testing.assert_allclose(printed, lm.run(tiny_graph(), {"x": X})["probs"], atol=1e-5)


@pytest.mark.parametrize(
    "inputs,message",
    [
        (["y=[1]"], "the model has no input 'y'; its inputs are ['x']"),
        ([], "missing --input for ['x']"),
        (["x=[[1,2,3,4]]", "x=[[1,2,3,4]]"], "input 'x' is given twice"),
        (["x=[[1,2"], "is neither a .npy file nor a JSON value"),
        (['x=[["a","b","c","d"]]'], "<U1 values cannot be passed as FP32"),
        (["x=missing.npy"], "input 'x': cannot read missing.npy"),
        (["x"], "is not NAME=FILE.npy or NAME=JSON"),
        (["x=[[1,2,3]]"], "400: input 'x'"),  # the server checks the shape against the signature
    ],
)
def test_predict_errors_are_one_line(deployed, inputs, message):
    args = [a for i in inputs for a in ("--input", i)]
    result = luminal(deployed, "predict", "tiny", *args)
    assert result.exit_code == 1, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_predict_of_an_undeployed_model(server):
    result = luminal(server, "predict", "nope", "--input", "x=[1]")
    assert result.exit_code == 1 and "404: model 'nope' is not deployed" in result.stderr, result.output


def test_predict_refuses_a_pickled_npy(deployed, tmp_path: Path):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    result = luminal(deployed, "predict", "tiny", "--input", f"x={tmp_path / 'obj.npy'}")
    assert result.exit_code == 1 and "allow_pickle" in result.stderr, result.output


def test_compile_prints_the_report_and_writes_a_loadable_program(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / "cache"))  # a cold compile, so the times are real
    lm.save(tiny_graph(), tmp_path / "m.lgraph")
    result = runner.invoke(app, ["compile", str(tmp_path / "m.lgraph"), "--out", str(tmp_path / "m.lprog")])
    assert result.exit_code == 0, result.output
    for stage in ("dead-code", "constant-folding", "search", "lower+fuse+codegen"):
        assert stage in result.stdout
    assert "e-graph" in result.stdout and "kernels: " in result.stdout and "naive" in result.stdout
    from luminal.compiler.artifact import load_program

    program = load_program(tmp_path / "m.lprog")
    assert f"kernels: {len(program.kernels.kernels)} " in result.stdout  # the report describes the saved program
    np.testing.assert_allclose(program.run({"x": X})["probs"], lm.run(tiny_graph(), {"x": X})["probs"], rtol=1e-5)


@pytest.mark.parametrize(
    "args,message",
    [
        (["missing.lgraph"], "missing.lgraph: no such file"),
        (["BAD"], "not a valid .lgraph file"),
        (["GOOD", "--target", "tpu"], "unknown target 'tpu'"),
        (["GOOD", "--out", "/proc/nope/m.lprog"], "cannot write /proc/nope/m.lprog"),
    ],
)
def test_compile_errors_are_one_line(tmp_path: Path, args, message):
    (tmp_path / "bad.lgraph").write_bytes(b"not a graph")
    lm.save(tiny_graph(), tmp_path / "good.lgraph")
    paths = {"BAD": str(tmp_path / "bad.lgraph"), "GOOD": str(tmp_path / "good.lgraph")}
    result = runner.invoke(app, ["compile", *(paths.get(a, a) for a in args)])
    assert result.exit_code == 1, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
