"""A bundle: one zip of named entries plus manifest.json recording each entry's sha256 and size, the shape the
multi-part formats share (LLM packages, compiled LLM programs).

Writing is deterministic and atomic like the `.lgraph` writer (`luminal.safezip`). Reading treats the file as
hostile: the end record is checked before zipfile parses a directory, every entry name must be one the format
knows, every size is capped before and while reading, the compression ratio is bounded, and every entry must
hash to what the manifest says. Defects raise the caller's error class, naming the entry.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
import zipfile
from dataclasses import dataclass
from typing import IO, Any

from luminal.graph_json import dump_json, expect_keys, parse_json
from luminal.safezip import end_record, entry_info, read_entry, write_atomic

MANIFEST = "manifest.json"
MANIFEST_CAP = 1 << 20  # a manifest lists a handful of entries and two signatures
MAX_RATIO = 200  # deflate of real JSON stays far below this; a higher declared ratio is a compression bomb
RATIO_FLOOR = 1 << 20  # entries smaller than this cannot be bombs
MAX_DIRECTORY_BYTES = 64 * 1024
MAX_ENTRIES = 32  # no bundle format holds more entries than this


@dataclass(frozen=True)
class BundleFormat:
    name: str  # the manifest's "format"
    version: int
    caps: dict[str, int]  # every entry the format may hold, with its uncompressed size cap
    required: frozenset[str]
    error: type[Exception]
    stored: frozenset[str] = frozenset()  # entries written uncompressed (weights: they barely compress)

    @property
    def max_file_bytes(self) -> int:
        return sum(self.caps.values()) + MANIFEST_CAP + (1 << 20)


def write_bundle(fmt: BundleFormat, path: Any, entries: dict[str, list], fields: dict[str, Any]) -> None:
    """Write `entries` (name -> byte parts) and a manifest of `fields` plus the entries' digests, atomically."""
    write_atomic(path, lambda f: _write(fmt, f, entries, fields), ".bundle-")


def bundle_to_bytes(fmt: BundleFormat, entries: dict[str, list], fields: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    _write(fmt, buf, entries, fields)
    return buf.getvalue()


def _write(fmt: BundleFormat, f: IO[bytes], entries: dict[str, list], fields: dict[str, Any]) -> None:
    unknown = sorted(set(entries) - set(fmt.caps))
    if unknown or not fmt.required <= set(entries):
        raise ValueError(f"{fmt.name}: entries {sorted(entries)} (unknown {unknown}, required {sorted(fmt.required)})")
    digests = {}
    for name, parts in entries.items():
        digest = hashlib.sha256()
        for part in parts:
            digest.update(part)
        digests[name] = {"sha256": digest.hexdigest(), "size": sum(len(memoryview(p)) for p in parts)}
    manifest = {**fields, "format": fmt.name, "format_version": fmt.version, "entries": digests}
    with zipfile.ZipFile(f, "w") as zf:
        _put(zf, MANIFEST, [dump_json(manifest)], zipfile.ZIP_DEFLATED)
        for name in sorted(entries):
            method = zipfile.ZIP_STORED if name in fmt.stored else zipfile.ZIP_DEFLATED
            _put(zf, name, entries[name], method)


def _put(zf: zipfile.ZipFile, name: str, parts: list, method: int) -> None:
    info = entry_info(name, method)
    info.file_size = sum(len(memoryview(p)) for p in parts)
    with zf.open(info, "w") as out:
        for part in parts:
            out.write(part)


def read_bundle(
    fmt: BundleFormat, source: Any, only: frozenset[str] | None = None
) -> tuple[dict[str, Any], dict[str, bytearray]]:
    """(manifest, entry bytes by name) of a bundle given as a path or its bytes; checked as the docstring says.
    With `only`, just those entries are read (and checked against the manifest); the others are left unread."""
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        return _read(fmt, io.BytesIO(data), len(data), only)
    with open(os.fspath(source), "rb") as f:
        return _read(fmt, f, os.fstat(f.fileno()).st_size, only)


def bundle_format_name(source: Any, error: type[Exception]) -> str | None:
    """The format named by a zip's manifest.json (None when it has none); only the manifest is read."""
    with open(os.fspath(source), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        zf = _open(f, size, MAX_ENTRIES, error)
        with zf:
            info = next((i for i in zf.infolist() if i.filename == MANIFEST), None)
            if info is None:
                return None
            manifest = parse_json(bytes(read_entry(zf, info, MANIFEST_CAP, error)), MANIFEST)
    return manifest.get("format") if isinstance(manifest, dict) else None


def _open(f: IO[bytes], size: int, max_entries: int, error: type[Exception]) -> zipfile.ZipFile:
    count, directory_size = end_record(f, size, error)
    if count > max_entries or directory_size > MAX_DIRECTORY_BYTES:
        raise error(f"the archive lists {count} entries in {directory_size} bytes; at most {max_entries} expected")
    try:
        return zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError, struct.error) as e:
        raise error(f"corrupt zip archive: {e}") from None


def _read(
    fmt: BundleFormat, f: IO[bytes], size: int, only: frozenset[str] | None = None
) -> tuple[dict[str, Any], dict[str, bytearray]]:
    error = fmt.error
    if size > fmt.max_file_bytes:
        raise error(f"the file is {size} bytes, over the limit of {fmt.max_file_bytes}")
    caps = {MANIFEST: MANIFEST_CAP, **fmt.caps}
    with _open(f, size, len(caps), error) as zf:
        infos: dict[str, zipfile.ZipInfo] = {}
        for info in zf.infolist():
            _check_entry(info, caps, size, error)
            if info.filename in infos:
                raise error(f"duplicate entry {info.filename!r}")
            infos[info.filename] = info
        if MANIFEST not in infos:
            raise error(f"missing entry {MANIFEST}")
        manifest = parse_json(bytes(read_entry(zf, infos[MANIFEST], MANIFEST_CAP, error)), MANIFEST)
        _check_manifest(fmt, manifest, set(infos) - {MANIFEST})
        wanted = [n for n in infos if n != MANIFEST and (only is None or n in only)]
        raw = {n: read_entry(zf, infos[n], caps[n], error) for n in wanted}
    for name, data in raw.items():
        entry = manifest["entries"][name]
        if entry["size"] != len(data) or entry["sha256"] != hashlib.sha256(data).hexdigest():
            raise error(f"{name} does not match the size and sha256 the manifest records for it")
    return manifest, raw


def _check_entry(info: zipfile.ZipInfo, caps: dict[str, int], size: int, error: type[Exception]) -> None:
    name = info.filename
    if name not in caps:  # also refuses absolute, parent and drive paths: none is a known name
        raise error(f"unexpected entry {name!r:.80}; this format holds {sorted(caps)}")
    if info.flag_bits & 0x1:
        raise error(f"entry {name} is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise error(f"entry {name} uses unsupported compression method {info.compress_type}")
    if info.file_size > caps[name]:
        raise error(f"entry {name} declares {info.file_size} bytes, over the cap of {caps[name]}")
    if info.header_offset + info.compress_size > size:
        raise error(f"entry {name} extends past the end of the file (truncated?)")
    if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
        raise error(f"entry {name} would inflate {info.compress_size} bytes to {info.file_size}: a compression bomb")


def _check_manifest(fmt: BundleFormat, manifest: Any, present: set[str]) -> None:
    error = fmt.error
    if not isinstance(manifest, dict) or manifest.get("format") != fmt.name:
        shown = manifest.get("format") if isinstance(manifest, dict) else manifest
        raise error(f"not a {fmt.name} file: {MANIFEST} names format {shown!r:.60}")
    version = manifest.get("format_version")
    if type(version) is not int or version != fmt.version:
        raise error(f"unsupported format version {version!r:.40}; this luminal reads {fmt.version}")
    entries = manifest.get("entries")
    if not isinstance(entries, dict) or set(entries) != present:
        listed = sorted(entries) if isinstance(entries, dict) else entries
        raise error(f"{MANIFEST} lists entries {listed!r:.200} but the archive holds {sorted(present)}")
    missing = sorted(fmt.required - present)
    if missing:
        raise error(f"missing entries {missing}")
    for name, entry in entries.items():
        expect_keys(entry, {"sha256", "size"}, f"{MANIFEST} entry {name}")
