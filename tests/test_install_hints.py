"""Every `pip install` hint in the repository names something that installs this project's parts: the
distribution `luminal-cloud` with extras pyproject.toml declares, the repository itself (`-e '.[dev]'`), a local
wheel, or a third-party package pyproject.toml depends on. (`luminal` on PyPI is another project: a hint
`pip install 'luminal[cuda]'` installs the wrong thing.)
"""

from __future__ import annotations

import os
import re
import tomllib
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "luminal-cloud"
SKIPPED = {"build", "__pycache__"}  # and every dot-folder (.venv, .git, .cache) but .ci
SCANNED_DOT_FOLDERS = {".ci"}
TEXT_SUFFIXES = {".py", ".sh", ".md", ".toml", ".yaml", ".yml", ".txt", ".cfg", ".ini", ".tpl", ".json", ".mako"}
TEXT_NAMES = {"Makefile", "Dockerfile"}
# pip's options that take a value: their value is no requirement (`-e` is, as a local path).
VALUED_OPTIONS = {"-r", "--requirement", "-c", "--constraint", "-t", "--target", "-i", "--index-url",
                  "--extra-index-url", "-f", "--find-links", "--prefix", "--root", "--python", "--platform",
                  "--python-version", "--implementation", "--abi", "--progress-bar", "--cache-dir"}  # fmt: skip
PACKAGING_TOOLS = {"pip", "setuptools", "wheel"}  # `pip install --upgrade pip` is no hint about this project
# What follows `pip install` up to the end of its (backslash-continued) line.
HINT = re.compile(r"\bpip install\b(.*)")
# An argument: a quoted string, or a bare word of what requirements, paths and shell variables are made of (which
# prose may follow with punctuation).
ARGUMENT = re.compile(r"""\s+(?:'([^']*)'|"([^"]*)"|([\w.\-\[\]=!~*/${}+]+)(?=[\s)`'":;,]|$))""")
# `luminal[...]` anywhere: the other project's extras, even outside a pip command ("or luminal[cuda12]").
OTHER_PROJECT_EXTRAS = re.compile(r"(?<![\w-])luminal\[")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@cache
def _declared() -> tuple[set[str], set[str]]:
    """The extras of luminal-cloud, and every distribution it or any extra depends on (canonical names)."""
    project = _pyproject()
    extras = set(project["optional-dependencies"])
    requirements = [*project["dependencies"], *(r for rs in project["optional-dependencies"].values() for r in rs)]
    return extras, {canonicalize_name(Requirement(r).name) for r in requirements}


def _is_text(path: Path) -> bool:
    if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES or "Dockerfile" in path.name:
        return True
    with path.open("rb") as f:
        return f.read(2) == b"#!"  # a script without a suffix (.ci/run)


def _text_files() -> list[Path]:
    found = []
    for folder, subfolders, names in os.walk(ROOT):
        # Pruned in place, so the walk never enters .venv or .git.
        subfolders[:] = sorted(d for d in subfolders if d in SCANNED_DOT_FOLDERS or not skipped(d))
        found += [Path(folder) / name for name in sorted(names) if not skipped(name) and _is_text(Path(folder) / name)]
    return found


def skipped(name: str) -> bool:
    return name.startswith(".") or name in SKIPPED or name.endswith(".egg-info")


def _arguments(rest: str) -> list[str]:
    """The arguments right after `pip install`, unquoted, up to the first thing that is none (prose, a colon)."""
    arguments, at = [], 0
    while match := ARGUMENT.match(rest, at):
        quoted_single, quoted_double, bare = match.groups()
        word = re.sub(r"(?<=\w)\.$", "", bare) if bare is not None else None  # "pip install torch." ends a sentence
        arguments.append(word if word is not None else quoted_single or quoted_double or "")
        at = match.end()
    return arguments


def _targets(arguments: list[str]) -> list[str]:
    """The arguments that name what to install: options and their values dropped, `-e PATH` kept."""
    targets, skip = [], False
    for arg in arguments:
        if skip:
            skip = False
        elif arg in ("-e", "--editable"):
            continue  # its value is the next argument, a local path
        elif arg in VALUED_OPTIONS:
            skip = True
        elif not arg.startswith("-"):
            targets.append(arg)
    return targets


def problem(target: str, extras: set[str], declared: set[str]) -> str | None:
    """Why `pip install TARGET` is a wrong hint for this project, or None."""
    if "$" in target or "{" in target:
        return None  # a shell variable or a format placeholder: what it holds is checked where it is written
    path, _, wanted = target.partition("[")
    local = path.startswith((".", "/", "~")) or path.endswith(".whl") or "*" in path
    if local:  # this repository or a wheel built from it: only its extras can be wrong
        unknown = set(wanted.rstrip("]").split(",")) - extras - {""}
        return f"extras {sorted(unknown)} are not luminal-cloud's" if unknown else None
    try:
        requirement = Requirement(target)
    except InvalidRequirement as e:
        return f"not a requirement pip takes: {e}"
    name = canonicalize_name(requirement.name)
    if name == DISTRIBUTION:
        unknown = requirement.extras - extras
        return f"extras {sorted(unknown)} are not luminal-cloud's" if unknown else None
    if name in declared or name in PACKAGING_TOOLS:
        return None
    return f"{requirement.name!r} is neither luminal-cloud nor a package luminal-cloud depends on"


def hints(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every `pip install` target in `text`, backslash continuations joined."""
    found = []
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        logical, at = line, number
        while logical.endswith("\\") and at < len(lines):
            logical, at = logical[:-1] + " " + lines[at], at + 1
        for match in HINT.finditer(logical):
            found += [(number, target) for target in _targets(_arguments(match.group(1)))]
    return found


def wrong_hints(text: str) -> list[str]:
    """'LINE: what is wrong' for every wrong hint in `text`."""
    extras, declared = _declared()
    wrong = []
    for number, target in hints(text):
        if (why := problem(target, extras, declared)) is not None:
            wrong.append(f"{number}: pip install {target}: {why}")
    for match in OTHER_PROJECT_EXTRAS.finditer(text):
        number = text.count("\n", 0, match.start()) + 1
        wrong.append(f"{number}: `luminal[...]` names another project's extras; say luminal-cloud[...]")
    return wrong


@pytest.mark.parametrize(
    ("text", "wrong"),
    [
        ("raise X(\"no CuPy (pip install 'luminal[cuda]')\")", True),  # the other project
        ("CuPy is missing (pip install cupy-cuda13x, or luminal[cuda12])", True),
        ("pip install luminal", True),
        ("pip install 'luminal-cloud[gpu]'", True),  # no such extra
        ("pip install -e '.[nope]'", True),
        ("(pip install left-pad)", True),  # not something luminal-cloud uses
        ("pip install \\\n    luminal", True),
        ("hint: pip install 'luminal-cloud[cuda]': CuPy and NVRTC", False),
        ('$(PY) -m pip install -q -e ".[dev]"', False),
        ("run pip install --upgrade pip.", False),
        ("pip install --no-cache-dir --target /tmp/site .whl/*.whl \\", False),
        ("pip install \"${wheel}[cuda]\" 'nvidia-cublas>=13,<14' torch==2.13.0", False),
    ],
)
def test_the_check_tells_right_hints_from_wrong(text, wrong):
    assert bool(wrong_hints(text)) == wrong, wrong_hints(text)


def test_every_install_hint_names_luminal_cloud_or_a_dependency():
    files = _text_files()
    assert {ROOT / "runtime" / "cuda" / "__init__.py", ROOT / ".ci" / "run"} <= set(files)  # the scan reaches them
    wrong = []
    for path in files:
        if path != Path(__file__).resolve():  # its own examples of wrong hints
            wrong += [f"{path.relative_to(ROOT)}:{w}" for w in wrong_hints(path.read_text(errors="replace"))]
    assert wrong == [], "\n".join(wrong)
