"""`lm.onnx` and `lm.torch` work after a bare `import luminal`, which imports neither them nor their heavy
dependencies (checked in a fresh interpreter, where nothing else has imported them)."""

import subprocess
import sys
from pathlib import Path

import pytest

import luminal as lm

ROOT = Path(__file__).resolve().parents[1]

FRESH = """
import sys
import luminal as lm
heavy = [m for m in ("luminal.onnx", "luminal.torch", "onnx", "torch") if m in sys.modules]
assert not heavy, f"import luminal imported {heavy}"
assert callable(lm.onnx.load) and callable(lm.torch.export)
assert sys.modules["luminal.onnx"] is lm.onnx and sys.modules["luminal.torch"] is lm.torch
"""


def test_submodules_load_on_first_use_only():
    done = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_dir_lists_them_and_other_names_still_fail():
    assert {"onnx", "torch"} <= set(dir(lm))
    with pytest.raises(AttributeError, match="has no attribute 'tensorflow'"):
        lm.tensorflow  # noqa: B018
