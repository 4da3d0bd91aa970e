"""A serving process bounds libgomp's spinning between regions, unless the operator chose how OpenMP waits."""

import os

import pytest

from luminal.scheduler.openmp_spin import SERVING_SPINCOUNT, bound_openmp_spinning


@pytest.fixture(autouse=True)
def unset(monkeypatch):
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)


def test_unset_it_is_bounded(monkeypatch):
    bound_openmp_spinning()
    assert os.environ["GOMP_SPINCOUNT"] == str(SERVING_SPINCOUNT)


@pytest.mark.parametrize("name, value", [("GOMP_SPINCOUNT", "300000"), ("OMP_WAIT_POLICY", "active")])
def test_an_operators_choice_stands(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    bound_openmp_spinning()
    assert os.environ[name] == value
    if name == "OMP_WAIT_POLICY":
        assert "GOMP_SPINCOUNT" not in os.environ  # the policy's own spin count applies
