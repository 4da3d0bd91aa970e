"""`luminal admin tenants ...` against a real server (SQLite and PostgreSQL): an operator creates a tenant whose
printed key works, lists tenants, sets and lifts quotas, suspends and resumes one; each error is one line with
status 1, and only the admin token is accepted."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from luminal.cli.main import app
from tests.cli.test_manage import one_line_error
from tests.gateway.conftest import BOOTSTRAP_KEY
from tests.gateway.tenancy import ADMIN_TOKEN, settings_with_admin

runner = CliRunner()


@pytest.fixture
def settings(tmp_path, database_url, request):
    return settings_with_admin(tmp_path, database_url, getattr(request, "param", ADMIN_TOKEN))


def luminal_admin(server, *args: str, token: str | None = ADMIN_TOKEN):
    env = {"LUMINAL_URL": server.url, "LUMINAL_ADMIN_TOKEN": token}
    return runner.invoke(app, ["admin", "tenants", *args], env=env)


def test_create_list_quota_suspend_resume(server):
    created = luminal_admin(server, "create", "beta", "--max-deployments", "2", "--max-rps", "50")
    assert created.exit_code == 0, created.output
    key = created.stdout.strip()
    assert key.startswith("lm_") and "Created tenant 2 (beta); its API key, shown only this once" in created.stderr
    beta = server.client(key=key)
    assert beta.get("/v1/models").status_code == 200

    listed = luminal_admin(server, "ls")
    assert re.search(r"1\s+default\s+active\s+0\s+1\s+-\s+-\s+-", listed.stdout), listed.stdout
    assert re.search(r"2\s+beta\s+active\s+0\s+1\s+2\s+-\s+50\s", listed.stdout), listed.stdout
    assert key not in listed.stdout

    quota = luminal_admin(server, "quota", "2", "--max-replicas", "3", "--max-rps", "none")
    assert quota.exit_code == 0, quota.output
    assert "Tenant 2 (beta) quotas: deployments 2, replicas 3, requests per second none." in quota.stdout

    suspended = luminal_admin(server, "suspend", "2", "--reason", "[red]unpaid")  # markup in a reason stays text
    assert suspended.exit_code == 0 and suspended.stdout.strip() == "Suspended tenant 2 (beta).", suspended.output
    assert beta.get("/v1/models").status_code == 403
    listed = luminal_admin(server, "ls")
    assert re.search(r"2\s+beta\s+suspended", listed.stdout), listed.stdout
    assert re.search(r"tenant 2 suspended since \S+ \S+: \[red\]unpaid", listed.stdout), listed.stdout
    one_line_error(luminal_admin(server, "suspend", "2"), "409: tenant 2 is already suspended")

    resumed = luminal_admin(server, "resume", "2")
    assert resumed.exit_code == 0 and resumed.stdout.strip() == "Resumed tenant 2 (beta).", resumed.output
    assert beta.get("/v1/models").status_code == 200
    one_line_error(luminal_admin(server, "resume", "2"), "409: tenant 2 is not suspended")


def test_errors_are_one_line(server):
    one_line_error(luminal_admin(server, "create", "default"), "409: a tenant named 'default' already exists")
    one_line_error(luminal_admin(server, "create", "has space"), "422: name: String should match pattern")
    one_line_error(luminal_admin(server, "resume", "99"), "404: tenant 99 not found")
    one_line_error(luminal_admin(server, "quota", "1"), "nothing to change: give --max-deployments")
    one_line_error(luminal_admin(server, "quota", "1", "--max-replicas", "many"), "--max-replicas: expected a number")
    one_line_error(luminal_admin(server, "quota", "1", "--max-replicas", "-1"), "422: max_replicas: Input should be")


@pytest.mark.parametrize(
    "token,message",
    [
        (None, "no admin token: pass --admin-token or set LUMINAL_ADMIN_TOKEN"),
        ("not-the-admin-token", "401: wrong admin token"),
        (BOOTSTRAP_KEY, "403: a tenant's API key cannot call the admin API"),
    ],
)
def test_only_the_admin_token_is_accepted(server, token, message):
    one_line_error(luminal_admin(server, "ls", token=token), message)


@pytest.mark.parametrize("settings", [None], indirect=True)
def test_a_gateway_without_a_token_says_its_admin_api_is_disabled(server):
    one_line_error(luminal_admin(server, "ls"), "404: the admin API is disabled on this gateway")
