"""Reading deploy/docker/*.Dockerfile and .dockerignore as Docker would, for what the tests ask of them: each
stage's instructions, what a stage copies from the build context, and whether the context holds a path."""

from __future__ import annotations

import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "deploy" / "docker"
PLATFORM = DOCKER / "platform.Dockerfile"
CUDA_WORKER = DOCKER / "cuda-worker.Dockerfile"


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, backslash continuations joined, comments dropped."""
    found, pending = [], ""
    for line in dockerfile.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).strip().partition(" ")
        found.append((keyword.upper(), rest.strip()))
        pending = ""
    return found


def stages(dockerfile: Path) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage, each list starting with its FROM."""
    result: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions(dockerfile):
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, rest))
    return result


def context_sources(stage: list[tuple[str, str]]) -> list[str]:
    """What the stage's COPY instructions take from the build context (not from another stage)."""
    sources = []
    for keyword, rest in stage:
        words = rest.split()
        if keyword == "COPY" and not any(w.startswith("--from") for w in words):
            assert not rest.startswith("["), "COPY in JSON form: read it here before relying on it"
            sources += [w.rstrip("/") for w in words if not w.startswith("--")][:-1]  # the last word: destination
    return sources


def ignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def in_context(path: str, patterns: list[str]) -> bool:
    """Whether `path` (relative to the root) reaches the build context: the last pattern matching it or one of its
    parent folders decides, `!` re-including (Docker's rule). `**/` matches any depth, the root's too."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    included = True
    for pattern in patterns:
        negated = pattern.startswith("!")
        cleaned = pattern.removeprefix("!").strip("/")
        globs = [cleaned, cleaned.removeprefix("**/")] if cleaned.startswith("**/") else [cleaned]
        if any(fnmatch.fnmatchcase(c, g) for c in candidates for g in globs):
            included = negated
    return included
