"""Fuzz every operation of the running gateway's OpenAPI schema (schemathesis): with a valid key, no generated
request, however malformed, may get a 5xx. SQLite only and a few dozen examples per operation, so it stays
well under a minute on a slow machine. It found: a version path of non-ASCII digits ('²') crashing int(), and
deployment ids past the database's integer range reaching the database."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tests.gateway.conftest import BOOTSTRAP_KEY

AUTH = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
EXAMPLES_PER_OPERATION = 40


@pytest.fixture
def database_url(tmp_path) -> str:  # overrides the SQLite + PostgreSQL pair: the schema is the same on both
    return f"sqlite:///{tmp_path / 'meta.db'}"


def _last_the_key_revocation(operation) -> tuple[bool, bool]:
    # Revoking keys last keeps the bootstrap key (id 1, a value the fuzzer likes) working for everything else.
    return operation.path == "/v1/keys/{key_id}", operation.method.upper() == "DELETE"


def test_no_request_gets_a_server_error(server):
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operations = sorted((result.ok() for result in schema.get_all_operations()), key=_last_the_key_revocation)
    assert len(operations) >= 15, [op.label for op in operations]  # the whole API, not an empty schema
    for operation in operations:

        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,  # no example replayed from an earlier run: each run is the same bounded work
            suppress_health_check=list(HealthCheck),
        )
        # Positive cases fit the schema and reach the handlers; negative ones break it (wrong types, missing
        # fields, out-of-range ids) and test the validation in front of them.
        @given(case=st.one_of(*(operation.as_strategy(generation_mode=mode) for mode in GenerationMode)))
        def fuzz(case) -> None:
            response = case.call(base_url=server.url, headers=AUTH, timeout=30)
            case.validate_response(response, checks=[not_a_server_error], headers=AUTH)

        fuzz()


@pytest.mark.parametrize("version", ["²", "٣", "1" * 10])
def test_what_the_fuzzer_found_stays_fixed(server, version):
    r = server.client().get(f"/v2/models/tiny/versions/{version}")
    assert r.status_code == 400 and "is not a positive integer" in r.json()["error"], r.text


@pytest.mark.parametrize("path", ["/v1/deployments/{}", "/v1/deployments/{}/workers", "/v1/keys/{}"])
def test_ids_past_the_integer_range_are_refused_before_the_database(server, path):
    r = server.client().get(path.format(2**80)) if "keys" not in path else server.client().delete(path.format(2**80))
    assert r.status_code == 422 and "less than or equal to 2147483647" in r.json()["error"], r.text
