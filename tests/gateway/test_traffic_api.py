"""The traffic-split API (`/v1/models/{name}/traffic`) against a real server, on SQLite and PostgreSQL: a split
takes effect for the next request, each answer names the version that computed it, a version without traffic
answers when named, every change is audited with its key, rollback restores the split before, and bad splits
are refused with what is wrong."""

from __future__ import annotations

from collections import Counter

from luminal.graph_file import graph_to_bytes
from tests.gateway.conftest import tiny_graph, upload
from tests.gateway.model_versions import answered_by, deploy_versions


def test_split_routes_audits_and_rolls_back(server, model_bytes):
    c = server.client()
    deploy_versions(c, model_bytes)
    outputs = {v: answered_by(c, version=v)[1] for v in (1, 2)}
    assert outputs[1] != outputs[2]
    assert c.get("/v1/models/tiny/traffic").json() == {"model": "tiny", "split": None, "versions": []}
    assert {answered_by(c)[0] for _ in range(3)} == {"2"}  # no split: the newest deployed version answers

    bot = server.client(key=c.post("/v1/keys", json={"name": "release-bot"}).json()["key"])
    assert bot.put("/v1/models/tiny/traffic", json={"split": {"1": 100}}).status_code == 200
    assert {answered_by(c)[0] for _ in range(3)} == {"1"}  # at once: the routing caches were cleared
    shown = bot.put("/v1/models/tiny/traffic", json={"split": {"1": 90, "2": 10}})
    assert shown.status_code == 200, shown.text
    assert shown.json() == {
        "model": "tiny",
        "split": {"1": 90, "2": 10},
        "versions": [
            {"version": 1, "percent": 90, "status": "ready"},
            {"version": 2, "percent": 10, "status": "ready"},
        ],
    }
    answers = [answered_by(c) for _ in range(20)]
    assert Counter(v for v, _ in answers) == {"1": 18, "2": 2}
    assert all(output == outputs[int(v)] for v, output in answers)  # the version named is the one that computed

    rolled = c.post("/v1/models/tiny/traffic/rollback")
    assert rolled.status_code == 200 and rolled.json()["split"] == {"1": 100}
    assert {answered_by(c)[0] for _ in range(5)} == {"1"}
    assert answered_by(c, version=2) == ("2", outputs[2])  # reachable by its number without taking traffic

    history = c.get("/v1/models/tiny/traffic/history").json()
    assert [(h["action"], h["old_split"], h["new_split"], h["api_key_name"]) for h in history] == [
        ("rollback", {"1": 90, "2": 10}, {"1": 100}, None),  # the bootstrap key has no name
        ("set", {"1": 100}, {"1": 90, "2": 10}, "release-bot"),
        ("set", None, {"1": 100}, "release-bot"),
    ]
    assert history[1]["api_key_id"] == history[2]["api_key_id"] != history[0]["api_key_id"]
    assert len(c.get("/v1/models/tiny/traffic/history", params={"limit": 1}).json()) == 1

    cleared = c.delete("/v1/models/tiny/traffic")
    assert cleared.status_code == 200 and cleared.json()["split"] is None
    assert answered_by(c)[0] == "2"


def test_bad_splits_are_refused_naming_the_problem(server, model_bytes):
    c = server.client()
    deploy_versions(c, model_bytes)
    refusals = [
        ({"split": {"1": 90, "2": 20}}, 422, "the percentages sum to 110, not 100"),
        ({"split": {"x": 100}}, 422, "version 'x' is not a positive integer"),
        ({"split": {"0": 100}}, 422, "version '0' is not a positive integer"),
        ({"split": {"1": 90.5, "2": 9.5}}, 422, "split.1: Input should be a valid integer"),
        ({"split": {"1": 100, "2": 0}}, 422, "percent 0 is outside 1..100"),
        ({"split": {"1": 50, "01": 50}}, 422, "a version is named twice: ['01', '1']"),
        ({"split": {}}, 422, "split: Dictionary should have at least 1 item"),
        ({"split": {"1": 50, "9": 50}}, 404, "model 'tiny' has no version 9"),
    ]
    for body, status, message in refusals:
        r = c.put("/v1/models/tiny/traffic", json=body)
        assert (r.status_code, message in r.json()["error"]) == (status, True), (body, r.text)
    assert upload(c, "tiny", graph_to_bytes(tiny_graph(features=5))).status_code == 201  # uploaded, never deployed
    r = c.put("/v1/models/tiny/traffic", json={"split": {"1": 50, "3": 50}})
    assert r.status_code == 409 and "version 3 cannot take traffic: it is not deployed" in r.json()["error"], r.text
    r = c.post("/v1/models/tiny/traffic/rollback")
    assert r.status_code == 409 and "no traffic split changes to roll back" in r.json()["error"]
    assert c.delete("/v1/models/tiny/traffic").status_code == 409
    assert c.put("/v1/models/nope/traffic", json={"split": {"1": 100}}).status_code == 404
    assert c.get("/v1/models/tiny/traffic/history").json() == []


def test_a_version_that_stops_being_ready_drops_out(server, model_bytes):
    c = server.client()
    first, second = deploy_versions(c, model_bytes)
    assert c.put("/v1/models/tiny/traffic", json={"split": {"1": 50, "2": 50}}).status_code == 200
    assert Counter(answered_by(c)[0] for _ in range(4)) == {"1": 2, "2": 2}
    assert c.delete(f"/v1/deployments/{second['id']}").status_code == 204
    assert {answered_by(c)[0] for _ in range(4)} == {"1"}  # version 2's share went to version 1
    shown = c.get("/v1/models/tiny/traffic").json()
    assert shown["versions"][1] == {"version": 2, "percent": 50, "status": "not deployed"}
    assert c.get("/v2/models/tiny/ready").json() == {"name": "tiny", "ready": True}  # version 1 serves
    assert c.delete(f"/v1/deployments/{first['id']}").status_code == 204
    none_left = "no version in model 'tiny''s traffic split is ready"
    r = c.post("/v2/models/tiny/infer", json={"inputs": []})
    assert r.status_code == 503 and none_left in r.json()["error"]
    r = c.get("/v2/models/tiny/ready")
    assert r.status_code == 400 and none_left in r.json()["error"]
