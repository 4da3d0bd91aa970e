"""Fuzz the admin API's operations (schemathesis) with the admin token: no generated request, however malformed,
may get a 5xx. SQLite only, a few dozen examples per operation, as test_schemathesis.py does for the tenant API
(which never reaches the admin routes: a tenant key is refused before them)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tests.gateway.tenancy import ADMIN_TOKEN, settings_with_admin

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
EXAMPLES_PER_OPERATION = 40


@pytest.fixture(name="settings")
def admin_settings(tmp_path):
    return settings_with_admin(tmp_path, f"sqlite:///{tmp_path / 'meta.db'}")


def test_no_admin_request_gets_a_server_error(server):
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operations = [r.ok() for r in schema.get_all_operations() if r.ok().path.startswith("/v1/admin/")]
    assert len(operations) == 6, [op.label for op in operations]
    for operation in operations:

        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(case=st.one_of(*(operation.as_strategy(generation_mode=mode) for mode in GenerationMode)))
        def fuzz(case) -> None:
            response = case.call(base_url=server.url, headers=AUTH, timeout=30)
            case.validate_response(response, checks=[not_a_server_error], headers=AUTH)

        fuzz()
