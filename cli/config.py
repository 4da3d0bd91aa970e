"""Where client commands find the platform and the key: a flag, else $LUMINAL_URL / $LUMINAL_API_KEY, else the
config file `luminal login` writes ($LUMINAL_CONFIG, default ~/.config/luminal/config.toml), else the local
default address. The file holds a secret, so it is written with mode 0600, atomically."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from luminal.cli.client import ApiClient, ClientError, PlatformClient
from luminal.cli.common import fail

DEFAULT_URL = "http://127.0.0.1:8000"
FIELDS = ("url", "api_key")
ClientT = TypeVar("ClientT", bound=ApiClient)


@dataclass(frozen=True)
class Connection:
    url: str
    api_key: str | None


def config_path() -> Path:
    explicit = os.environ.get("LUMINAL_CONFIG")
    return Path(explicit).expanduser() if explicit else Path.home() / ".config" / "luminal" / "config.toml"


def read_config(path: Path | None = None) -> dict[str, str]:
    """The file's url and api_key (either may be absent); {} when there is no file."""
    path = path or config_path()
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ClientError(f"cannot read the config file {path}: {e}") from None
    wrong = [k for k in FIELDS if k in doc and not isinstance(doc[k], str)]
    if wrong:
        raise ClientError(f"config file {path}: {', '.join(wrong)} must be a string")
    return {k: doc[k] for k in FIELDS if k in doc}


def _toml_string(value: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped, as TOML requires."""
    escaped = "".join(
        f"\\u{ord(ch):04x}" if ord(ch) < 0x20 or ord(ch) == 0x7F else "\\" + ch if ch in '"\\' else ch for ch in value
    )
    return f'"{escaped}"'


def write_config(values: dict[str, str], path: Path | None = None) -> Path:
    """Replace the file with `values`. Written to a 0600 temporary file beside it and renamed over it, so the key
    is never readable by others, not even for a moment, and a crash leaves the old file whole."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = "".join(f"{k} = {_toml_string(values[k])}\n" for k in FIELDS if k in values)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)  # a crashed run's leftover; O_EXCL below then never reuses a file (or a link)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def resolve(url: str | None, api_key: str | None) -> Connection:
    """`url` and `api_key` are what Typer found in a flag or the environment (None when neither gave one)."""
    saved = read_config() if url is None or api_key is None else {}
    return Connection(url or saved.get("url") or DEFAULT_URL, api_key or saved.get("api_key"))


def connect(url: str | None, api_key: str | None) -> PlatformClient:
    conn = resolve(url, api_key)
    if not conn.api_key:
        raise ClientError("no API key: run `luminal login`, pass --api-key or set LUMINAL_API_KEY")
    return PlatformClient(conn.url, conn.api_key)


@contextmanager
def client_session(url: str | None, api_key: str | None) -> Iterator[PlatformClient]:
    """A connected client for one command; any `ClientError` inside ends the command with its one-line message."""
    with opened(lambda: connect(url, api_key)) as client:
        yield client


@contextmanager
def opened(make: Callable[[], ClientT]) -> Iterator[ClientT]:
    """The client `make` returns, for one command, closed after it; any `ClientError` in making or using it ends
    the command with its one-line message."""
    try:
        client = make()
        try:
            yield client
        finally:
            client.close()
    except ClientError as e:
        fail(str(e))
