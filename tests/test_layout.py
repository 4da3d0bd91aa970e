"""The repository layout of DESIGN.md: every component folder is a package imported under `luminal.*`."""

import importlib
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPONENTS = ["luminal", "compiler", "runtime", "runtime/cuda", "runtime/metal", "store", "gateway", "scheduler",
              "batching", "provisioner", "cli"]  # fmt: skip
NOT_PACKAGES = {"tests", "bench", "examples", "deploy", ".venv", ".git", ".ci"}


def _setuptools():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_root_holds_the_designed_components():
    for folder in COMPONENTS + ["deploy/helm", "tests", "bench"]:
        assert (ROOT / folder).is_dir(), f"{folder}/ is missing"


def test_every_package_folder_is_mapped_and_listed():
    cfg = _setuptools()
    mapping = {path: name for name, path in cfg["package-dir"].items()}
    listed = set(cfg["packages"])
    for init in ROOT.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts[0] in NOT_PACKAGES or any(p.startswith(".") for p in rel.parts):
            continue
        # The longest mapped prefix decides the dotted name (runtime/cuda -> luminal.runtime.cuda).
        parts = rel.parts
        for cut in range(len(parts), 0, -1):
            prefix = "/".join(parts[:cut])
            if prefix in mapping:
                dotted = ".".join([mapping[prefix], *parts[cut:]])
                break
        else:
            raise AssertionError(f"package folder {rel} is not mapped in pyproject.toml [tool.setuptools.package-dir]")
        assert dotted in listed, f"{dotted} ({rel}) is not listed in [tool.setuptools] packages"


def test_every_listed_package_imports():
    for name in _setuptools()["packages"]:
        importlib.import_module(name)
