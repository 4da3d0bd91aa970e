"""Reading the few named files a model folder is built from, treating the folder as hostile: a name from the
folder's own JSON (modules.json's module paths) cannot leave it, a symlink cannot point out of it, and no file is
read past a cap, so `luminal deploy FOLDER` never uploads or parses anything it was not asked for."""

from __future__ import annotations

import json
import stat
from pathlib import Path, PurePosixPath
from typing import Any

MAX_JSON_BYTES = 1 << 20  # config.json and its kin are a few KiB; a MiB leaves room and stops a runaway file


class FolderFileError(ValueError):
    """A model folder's file is missing, outside the folder, not a plain file, or too large."""


def folder_file(folder: Path, name: str) -> Path:
    """`folder/name`, refused unless `name` is a relative path that stays inside the folder (symlinks followed)."""
    relative = PurePosixPath(name)
    if not name or relative.is_absolute() or ".." in relative.parts or "\\" in name:
        raise FolderFileError(f"{name!r:.80} is not a path inside the model folder")
    path = folder / relative
    root = folder.resolve()
    if not path.resolve().is_relative_to(root):
        raise FolderFileError(f"{name!r:.80} leads outside the model folder {folder}")
    return path


def read_folder_bytes(folder: Path, name: str, cap: int) -> bytes:
    """The bytes of `folder/name`: a plain file of at most `cap` bytes, inside the folder."""
    path = folder_file(folder, name)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise FolderFileError(f"{folder} has no {name}") from None
    if not stat.S_ISREG(info.st_mode):
        raise FolderFileError(f"{folder}/{name} is not a plain file")
    if info.st_size > cap:
        raise FolderFileError(f"{folder}/{name} is {info.st_size} bytes; at most {cap} are read")
    with path.open("rb") as f:
        data = f.read(cap + 1)  # the file may have grown since stat
    if len(data) > cap:
        raise FolderFileError(f"{folder}/{name} is over {cap} bytes")
    return data


def read_folder_json(folder: Path, name: str, cap: int = MAX_JSON_BYTES) -> Any:
    """`folder/name` parsed as JSON (see read_folder_bytes); bad JSON names the file."""
    try:
        return json.loads(read_folder_bytes(folder, name, cap))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FolderFileError(f"{folder}/{name} is not JSON: {e}") from None
