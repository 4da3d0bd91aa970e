"""Test-suite settings: property tests are deterministic under `make test` (the same examples every run,
so CI never flakes on a newly drawn case); `HYPOTHESIS_PROFILE=explore` draws fresh random examples."""

import os

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
