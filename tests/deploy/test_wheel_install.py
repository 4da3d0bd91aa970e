"""The wheel, built from exactly what the container images copy, installed into a fresh virtual environment outside
the repository: it holds every module and data file of the source tree, and from there `luminal serve` starts
(its Alembic migrations came with it), `luminal deploy` uploads a model exported there and compiles it, and the
endpoint answers.

Quick and offline: the wheel goes in without its dependencies, which the new environment reads from this one's
site-packages through a plain path line in a .pth file. Such a line runs none of that folder's own .pth files, so
this environment's editable install of the repository stays out of sight (the test checks where luminal is
imported from). Every process runs in a temporary folder, so nothing of the repository is found by accident.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import tomllib
from pathlib import Path

import httpx
import numpy as np
import pytest

import luminal as lm
from tests.deploy.dockerfiles import PLATFORM, ROOT, context_sources, stages
from tests.tls_context import tls_context

# Run inside the new environment: where each listed package is imported from, and a small model saved with its lm.
WHERE_AND_EXPORT = """
import importlib, json, sys
import numpy as np
import luminal as lm
g = lm.Graph()
x = g.input("x", (lm.sym("batch", 1, 64), 4))
(x @ g.weight("w", (4, 3))).softmax(-1).output("probs")
g.bind({"w": np.arange(12, dtype=np.float32).reshape(4, 3) / 10})
lm.save(g, "tiny.lgraph")
print(json.dumps({name: list(importlib.import_module(name).__path__) for name in sys.argv[1:]}))
"""


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _installed_path(source_file: Path) -> str:
    """Where a file of the repository lands in site-packages, through pyproject's package-dir mapping (the longest
    folder that holds it: runtime/cuda/x.py -> luminal/runtime/cuda/x.py)."""
    rel = source_file.relative_to(ROOT).as_posix()
    folders = {folder: package for package, folder in _setuptools()["package-dir"].items()}
    folder = max((f for f in folders if rel.startswith(f + "/")), key=len)
    return folders[folder].replace(".", "/") + rel.removeprefix(folder)


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def _env(tmp: Path) -> dict[str, str]:
    """The caller's environment without anything that points Python or luminal elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LUMINAL_", "PYTHON", "VIRTUAL_ENV"))}
    # Compiled programs cached apart from the developer's own, so this compile runs from the installed code.
    return env | {"LUMINAL_CACHE_DIR": str(tmp / "cache"), "LUMINAL_CONFIG": str(tmp / "cli.toml"),
                  "PYTHONUNBUFFERED": "1"}  # fmt: skip


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    """The new environment, where it imports each listed package from, and tiny.lgraph saved beside it."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    for name in context_sources(stages(PLATFORM)[0]):  # what the images' wheel stage copies, no byte code
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, source / name)
    run = dict(cwd=tmp, capture_output=True, text=True, timeout=180)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "--no-cache-dir", "--wheel-dir", str(tmp / "dist"), str(source)], **run)  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp / "dist").glob("luminal_cloud-*.whl")
    env = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, **run)
    python = env / "bin" / "python"
    # This environment's pip installs into the new one (which has none of its own).
    pip_install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                                "--no-index", "--no-cache-dir", str(wheel)], **run)  # fmt: skip
    assert pip_install.returncode == 0, pip_install.stdout + pip_install.stderr
    (site,) = glob.glob(str(env / "lib" / "python3*" / "site-packages"))
    dependencies = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "dev-dependencies.pth").write_text("".join(f"{path}\n" for path in sorted(dependencies)))
    packages = _setuptools()["packages"]
    found = subprocess.run([str(python), "-c", WHERE_AND_EXPORT, *packages], env=_env(tmp), **run)
    assert found.returncode == 0, found.stderr
    return env, json.loads(found.stdout)


def test_the_wheel_holds_every_file_of_the_components(installed):
    venv, imported_from = installed
    for package, paths in imported_from.items():
        assert all(Path(p).is_relative_to(venv) for p in paths), f"{package} imported from {paths}, not the venv"
    (site,) = [Path(p) for p in imported_from["luminal"]]
    installed = {p.relative_to(site.parent).as_posix() for p in _files(site)}
    components = {folder.split("/")[0] for folder in _setuptools()["package-dir"].values()}
    # Modules, headers of the host shims, Alembic's migrations and template: every file, and nothing else.
    assert installed == {_installed_path(p) for c in components for p in _files(ROOT / c)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(url: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert server.poll() is None, "luminal serve exited:\n" + log.read_text()
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=1, verify=tls_context()).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "luminal serve did not become ready:\n" + log.read_text()
        time.sleep(0.1)  # the next poll


def test_serve_and_deploy_from_the_installed_wheel(installed):
    venv, _ = installed
    tmp = venv.parent
    env, bin_ = _env(tmp), venv / "bin"
    port, log = _free_port(), tmp / "serve.log"
    url = f"http://127.0.0.1:{port}"
    with log.open("w") as out:
        # A session of its own: whatever it starts is stopped with it.
        command = [str(bin_ / "luminal"), "serve", "--port", str(port), "--data-dir", str(tmp / "data")]
        server = subprocess.Popen(command, cwd=tmp, env=env, stdout=out, stderr=out, start_new_session=True)
    try:
        _ready(url, server, log)
        # The embedded default's first start creates a tenant and prints its key once.
        key = re.search(r"shown only this once:\n(\S+)", log.read_text()).group(1)
        client_env = env | {"LUMINAL_URL": url, "LUMINAL_API_KEY": key}
        deployed = subprocess.run([str(bin_ / "luminal"), "deploy", "tiny.lgraph", "--gpu", "cpu"], cwd=tmp,
                                  env=client_env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr + log.read_text()
        endpoint = re.search(r"Endpoint: (\S+)", deployed.stdout).group(1)
        x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
        body = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": x.reshape(-1).tolist()}]}
        answer = httpx.post(endpoint, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert answer.status_code == 200, answer.text
        (output,) = answer.json()["outputs"]
        want = lm.run(lm.load(tmp / "tiny.lgraph"), {"x": x})["probs"]
        np.testing.assert_allclose(np.reshape(output["data"], output["shape"]), want, rtol=1e-5)
        # The dashboard's page and script are package data: the installed gateway serves them from the wheel.
        for path in ("/dashboard", "/dashboard/static/dashboard.js"):
            assert httpx.get(url + path, timeout=30).status_code == 200, path
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(server.pid, signal.SIGKILL)  # the server, if it hung, and anything of its session left behind
        except ProcessLookupError:
            pass
        server.wait(timeout=10)
