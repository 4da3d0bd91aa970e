"""Test-suite settings: property tests are deterministic under `make test` (the same examples every run,
so CI never flakes on a newly drawn case); `HYPOTHESIS_PROFILE=explore` draws fresh random examples.
`@pytest.mark.needs("g++")` names a prerequisite a test cannot run without (tests/prerequisites.py): missing, the
test skips saying how to get it, and under CI it fails."""

import os

from hypothesis import settings

from tests import prerequisites

settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


def pytest_configure(config):
    names = ", ".join(prerequisites.PREREQUISITES)
    config.addinivalue_line("markers", f"needs(name): the test needs that prerequisite ({names})")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs"):
        for name in mark.args:
            prerequisites.require(name)
