"""`luminal models | deployments | keys` against a real server (SQLite and PostgreSQL): each listing shows what
the API holds, each change is visible through the API afterwards, and each error is one line with status 1."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from luminal.cli.main import app
from luminal.graph_file import graph_to_bytes
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, tiny_graph, upload

runner = CliRunner()


def luminal(server, *args: str):
    return runner.invoke(app, list(args), env={"LUMINAL_URL": server.url, "LUMINAL_API_KEY": BOOTSTRAP_KEY})


def one_line_error(result, message: str) -> None:
    assert result.exit_code == 1, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_models_ls_and_rm(server, model_bytes):
    assert luminal(server, "models", "ls").stdout.strip() == "No models."
    c = server.client()
    upload(c, "tiny", model_bytes)
    upload(c, "tiny", graph_to_bytes(tiny_graph(features=5)))
    listed = luminal(server, "models", "ls")
    assert listed.exit_code == 0, listed.output
    assert re.search(r"tiny\s+1,2\s+x:FP32\[-1, 5\]\s+probs:FP32\[-1, 3\]", listed.stdout), listed.stdout
    removed = luminal(server, "models", "rm", "tiny", "--version", "1")
    assert removed.exit_code == 0 and "Deleted model tiny version 1." in removed.stdout, removed.output
    assert [v["version"] for v in c.get("/v1/models/tiny").json()["versions"]] == [2]
    one_line_error(luminal(server, "models", "rm", "tiny", "--version", "1"), "404: model 'tiny' has no version 1")
    assert luminal(server, "models", "rm", "tiny").exit_code == 0
    assert c.get("/v1/models").json() == []
    one_line_error(luminal(server, "models", "rm", "tiny"), "404: model 'tiny' not found")


def test_deleting_the_last_version_deletes_the_model_and_its_deployment(server, model_bytes):
    c = server.client()
    upload(c, "tiny", model_bytes)
    deploy_and_wait(c, "tiny")
    assert luminal(server, "models", "rm", "tiny", "--version", "1").exit_code == 0
    assert c.get("/v1/models").json() == [] and c.get("/v1/deployments").json() == []


def test_deployments_ls_scale_rm(server, model_bytes):
    c = server.client()
    upload(c, "tiny", model_bytes)
    d = deploy_and_wait(c, "tiny", max_replicas=2)
    listed = luminal(server, "deployments", "ls")
    assert re.search(rf"{d['id']}\s+tiny\s+1\s+cpu\s+ready\s+0-2\s+8\s+5", listed.stdout), listed.stdout
    scaled = luminal(server, "deployments", "scale", str(d["id"]), "--min", "1", "--max", "4", "--max-delay-ms", "7")
    assert scaled.exit_code == 0, scaled.output
    assert "replicas 1-4, max batch 8, max delay 7 ms" in scaled.stdout
    now = c.get(f"/v1/deployments/{d['id']}").json()
    assert (now["min_replicas"], now["max_replicas"], now["max_queue_delay_ms"]) == (1, 4, 7)
    one_line_error(luminal(server, "deployments", "scale", str(d["id"]), "--min", "5"), "409: min_replicas 5 would")
    one_line_error(luminal(server, "deployments", "scale", str(d["id"])), "nothing to change")
    one_line_error(
        luminal(server, "deployments", "scale", str(d["id"]), "--max-batch-size", "0"),
        "422: max_batch_size: Input should be greater than or equal to 1",
    )
    assert luminal(server, "deployments", "rm", str(d["id"])).stdout.strip() == f"Deleted deployment {d['id']}."
    assert luminal(server, "deployments", "ls").stdout.strip() == "No deployments."
    one_line_error(luminal(server, "deployments", "rm", str(d["id"])), f"404: deployment {d['id']} not found")


def test_keys_ls_create_revoke(server):
    created = luminal(server, "keys", "create", "--name", "[bold]laptop")  # rich markup in a name stays text
    assert created.exit_code == 0, created.output
    key = created.stdout.strip()
    assert key.startswith("lm_") and "shown only this once" in created.stderr
    assert server.client(key=key).get("/v1/keys").status_code == 200
    listed = luminal(server, "keys", "ls")
    assert "[bold]laptop" in listed.stdout and f"{key[:7]}…" in listed.stdout and key not in listed.stdout
    new_id = next(k["id"] for k in server.client().get("/v1/keys").json() if k["name"] == "[bold]laptop")
    revoked = luminal(server, "keys", "revoke", str(new_id))
    assert revoked.exit_code == 0 and revoked.stdout.startswith(f"Revoked API key {new_id} at "), revoked.output
    assert server.client(key=key).get("/v1/keys").status_code == 401
    one_line_error(luminal(server, "keys", "revoke", str(new_id)), "409: API key")
    (bootstrap,) = [k for k in server.client().get("/v1/keys").json() if k["revoked_at"] is None]
    one_line_error(luminal(server, "keys", "revoke", str(bootstrap["id"])), "last active key")
    one_line_error(luminal(server, "keys", "revoke", "99999"), "404: API key 99999 not found")


@pytest.mark.parametrize("args", [["keys", "ls"], ["models", "ls"], ["deployments", "ls"]])
def test_a_wrong_key_is_one_line(server, args):
    result = runner.invoke(app, args, env={"LUMINAL_URL": server.url, "LUMINAL_API_KEY": "lm_wrong"})
    one_line_error(result, "401: invalid or revoked API key")
