"""`luminal deployments traffic | rollback` against a real server (SQLite and PostgreSQL): a split set from the
command line is the one the API holds and routes by, the listing shows each version's share and state, the
history names each change, rollback restores the split before, usage bills each version its answers, and bad
input is one line naming the problem."""

from __future__ import annotations

import csv
import io
import re
from collections import Counter

from tests.cli.test_manage import luminal, one_line_error
from tests.gateway.model_versions import answered_by, deploy_versions


def test_set_show_history_and_rollback(server, model_bytes):
    c = server.client()
    deploy_versions(c, model_bytes)
    shown = luminal(server, "deployments", "traffic", "tiny")
    assert shown.exit_code == 0 and "tiny: no traffic split; the newest deployed version answers." in shown.stdout

    assert luminal(server, "deployments", "traffic", "tiny", "1=100").exit_code == 0
    canary = luminal(server, "deployments", "traffic", "tiny", "1=90", "2=10")
    assert canary.exit_code == 0, canary.output
    assert re.search(r"1\s+90%\s+ready\s+2\s+10%\s+ready", canary.stdout), canary.stdout
    assert c.get("/v1/models/tiny/traffic").json()["split"] == {"1": 90, "2": 10}
    assert sorted(answered_by(c)[0] for _ in range(10)) == ["1"] * 9 + ["2"]

    history = luminal(server, "deployments", "traffic", "tiny", "--history")
    assert re.search(r"2\s+\S+ \S+\s+set\s+1=100\s+1=90 2=10\s+1\s*\n", history.stdout), history.stdout
    assert re.search(r"1\s+\S+ \S+\s+set\s+newest version\s+1=100\s+1", history.stdout), history.stdout

    rolled = luminal(server, "deployments", "rollback", "tiny")
    assert rolled.exit_code == 0 and "Rolled back tiny's traffic split." in rolled.stdout, rolled.output
    assert re.search(r"1\s+100%\s+ready", rolled.stdout), rolled.stdout
    assert {answered_by(c)[0] for _ in range(5)} == {"1"}

    # `luminal usage` bills each version its own answers: 9 + 5 by version 1, 1 by version 2.
    usage = luminal(server, "usage", "--since", "0", "--by", "day", "--format", "csv")
    billed = Counter()
    for row in csv.DictReader(io.StringIO(usage.stdout)):
        billed[row["version"]] += int(row["requests"])
    assert billed == {"1": 14, "2": 1}, usage.stdout

    cleared = luminal(server, "deployments", "traffic", "tiny", "--clear")
    assert cleared.exit_code == 0 and "no traffic split" in cleared.stdout
    assert c.get("/v1/models/tiny/traffic").json()["split"] is None


def test_bad_splits_are_one_line_errors(server, model_bytes):
    deploy_versions(server.client(), model_bytes)
    refusals = {
        ("1=90", "2=20"): "the percentages sum to 110, not 100",
        ("1=90", "two=10"): "'two=10' is not VERSION=PERCENT with whole numbers",
        ("1=90.5", "2=9.5"): "'1=90.5' is not VERSION=PERCENT with whole numbers",
        ("1:100",): "'1:100' is not VERSION=PERCENT",
        ("1=50", "1=50"): "version 1 is given twice",
        ("1=100", "2=0"): "'2=0': versions start at 1 and a percent is 1..100",
    }
    for pairs, message in refusals.items():
        result = luminal(server, "deployments", "traffic", "tiny", *pairs)
        assert result.exit_code == 2 and message in result.output, (pairs, result.output)
    one_line_error(
        luminal(server, "deployments", "traffic", "tiny", "1=50", "3=50"), "404: model 'tiny' has no version 3"
    )
    one_line_error(luminal(server, "deployments", "traffic", "nope", "1=100"), "404: model 'nope' not found")
    one_line_error(luminal(server, "deployments", "rollback", "tiny"), "409: model 'tiny' has no traffic split changes")
    one_line_error(luminal(server, "deployments", "traffic", "tiny", "1=100", "--clear"), "give a split, --clear")
