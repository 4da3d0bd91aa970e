"""`luminal login` and where client commands find the server and key: flag > environment > config file >
default. The config file is written with mode 0600 and only after the server accepted the key."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from luminal.cli.client import ClientError
from luminal.cli.config import DEFAULT_URL, Connection, read_config, resolve, write_config
from luminal.cli.main import app
from tests.gateway.conftest import BOOTSTRAP_KEY

runner = CliRunner()


def test_login_checks_the_key_and_writes_a_private_config(server, isolated_cli: Path):
    result = runner.invoke(app, ["login", "--url", server.url], input=f"{BOOTSTRAP_KEY}\n")
    assert result.exit_code == 0, result.output
    assert BOOTSTRAP_KEY not in result.output  # the prompt does not echo the key
    assert stat.S_IMODE(isolated_cli.stat().st_mode) == 0o600
    assert read_config() == {"url": server.url, "api_key": BOOTSTRAP_KEY}
    listed = runner.invoke(app, ["keys", "ls"])  # no flag, no environment: the saved login answers
    assert listed.exit_code == 0 and "lm_test…" in listed.stdout, listed.output


def test_a_refused_key_writes_nothing(server, isolated_cli: Path):
    result = runner.invoke(app, ["login", "--url", server.url, "--api-key", "lm_wrong-key"])
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: login failed: 401: invalid or revoked API key"
    assert not isolated_cli.exists()
    unreachable = runner.invoke(app, ["login", "--url", "http://127.0.0.1:9", "--api-key", BOOTSTRAP_KEY])
    assert unreachable.exit_code == 1 and "cannot reach http://127.0.0.1:9" in unreachable.stderr


def test_relogin_replaces_a_world_readable_file(server, isolated_cli: Path):
    isolated_cli.parent.mkdir(parents=True)
    isolated_cli.write_text('url = "http://old"\napi_key = "old"\n')
    isolated_cli.chmod(0o644)
    result = runner.invoke(app, ["login", "--url", server.url, "--api-key", BOOTSTRAP_KEY])
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(isolated_cli.stat().st_mode) == 0o600 and read_config()["url"] == server.url
    assert [p.name for p in isolated_cli.parent.iterdir()] == ["config.toml"]  # no temporary file left


def test_precedence_flag_over_env_over_file_over_default():
    assert resolve(None, None) == Connection(DEFAULT_URL, None)
    write_config({"url": "http://file", "api_key": "file-key"})
    assert resolve(None, None) == Connection("http://file", "file-key")
    # Typer hands a flag or, failing that, the environment variable to the command as the same argument.
    result = runner.invoke(app, ["keys", "ls"], env={"LUMINAL_URL": "http://127.0.0.1:9"})
    assert "cannot reach http://127.0.0.1:9" in result.stderr  # env beats the file
    result = runner.invoke(app, ["keys", "ls", "--url", "http://127.0.0.1:7"], env={"LUMINAL_URL": "http://x:1"})
    assert "cannot reach http://127.0.0.1:7" in result.stderr  # the flag beats the env
    assert resolve("http://flag", None) == Connection("http://flag", "file-key")  # each falls back on its own


def test_special_characters_round_trip_through_the_file():
    odd = 'k"ey\\with\ttab\x7f and é'
    write_config({"url": "http://h", "api_key": odd})
    assert read_config()["api_key"] == odd


@pytest.mark.parametrize("content,message", [("url = [", "is not valid TOML"), ("url = 5", "url must be a string")])
def test_a_broken_config_file_is_named(isolated_cli: Path, content, message):
    isolated_cli.parent.mkdir(parents=True)
    isolated_cli.write_text(content)
    with pytest.raises(ClientError, match=str(isolated_cli)):
        read_config()
    result = runner.invoke(app, ["models", "ls"])
    assert result.exit_code == 1 and str(isolated_cli) in result.stderr, result.output


def test_no_key_anywhere_says_how_to_log_in():
    result = runner.invoke(app, ["deployments", "ls"])
    assert result.exit_code == 1
    assert "no API key: run `luminal login`" in result.stderr and len(result.stderr.strip().splitlines()) == 1
