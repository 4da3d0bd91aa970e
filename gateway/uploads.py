"""Receiving a `.lgraph` upload: streamed to a spool file with a size cap and hashed on the way, validated by
the core's hostile-file loader, then moved into the artifact store and recorded as a model version.

The order makes every failure leave nothing behind: the spool file is removed in all cases, the blob is
published only after validation, and a database failure removes a blob that this upload added.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Request
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool

from luminal.embedding_package import is_embedding_package
from luminal.embedding_package import load_package as load_embedding_package
from luminal.gateway.errors import ApiError
from luminal.gateway.lora_models import lora_signature
from luminal.gateway.request_body import declared_length
from luminal.graph_file import load_graph
from luminal.graph_json import signature, symbol_table
from luminal.llm_package import is_llm_package, load_package
from luminal.store import models as model_store
from luminal.store.artifacts import ArtifactStore
from luminal.store.database import Database
from luminal.store.models import UploadedGraph
from luminal.store.tables import ModelVersion, Tenant

LLM_KIND = "llm"  # a model version's signature["kind"] when the upload was an LLM package
# ... an embedding package (its signature also says "max_seq_length", "normalized" and "matryoshka")
EMBEDDING_KIND = "embedding"
WRITE_BATCH = 4 << 20  # bytes gathered before one disk write (the server hands us ~64 KiB pieces)


@dataclass
class SpooledUpload:
    path: Path
    sha256: str
    size_bytes: int


async def spool_upload(request: Request, spool_dir: Path, max_bytes: int) -> SpooledUpload:
    """Stream the body to a new file under `spool_dir`; the caller removes `path` when done with it."""
    length = declared_length(request)
    if length is not None and length > max_bytes:
        raise ApiError(413, f"the upload is {length} bytes, over the limit of {max_bytes}")
    spool_dir.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=spool_dir, prefix="upload-", suffix=".lgraph")
    path, digest, size, pending = Path(name), hashlib.sha256(), 0, bytearray()
    try:
        with os.fdopen(fd, "wb") as f:
            async for chunk in request.stream():
                size += len(chunk)
                if size > max_bytes:
                    raise ApiError(413, f"the upload exceeds the limit of {max_bytes} bytes")
                digest.update(chunk)
                pending += chunk
                if len(pending) >= WRITE_BATCH:  # disk writes go to a thread: the event loop serves others
                    await run_in_threadpool(f.write, bytes(pending))
                    pending.clear()
            await run_in_threadpool(f.write, bytes(pending))
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    if size == 0:
        path.unlink(missing_ok=True)
        raise ApiError(400, "the upload is empty; send the .lgraph file's bytes as the request body")
    return SpooledUpload(path, digest.hexdigest(), size)


def inspect_graph(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The graph's signature and symbol ranges; raises GraphFileError (a 400) for any defect of the file.
    An LLM package is described by its prefill graph, its signature marked with kind "llm"; an embedding package
    by its graph, marked with kind "embedding" and its max_seq_length."""
    if is_llm_package(path):
        package = load_package(path)
        graph = package.graphs.prefill
        return {**signature(graph), "kind": LLM_KIND, **lora_signature(package)}, symbol_table(graph)
    if is_embedding_package(path):
        package = load_embedding_package(path)
        facts = {"kind": EMBEDDING_KIND, "max_seq_length": package.max_seq_length,
                 "normalized": package.normalized, "matryoshka": package.matryoshka}  # fmt: skip
        return {**signature(package.graph), **facts}, symbol_table(package.graph)
    graph = load_graph(path)
    return signature(graph), symbol_table(graph)


def register_upload(
    db: Database, artifacts: ArtifactStore, tenant: Tenant, name: str, upload: SpooledUpload
) -> tuple[ModelVersion, bool]:
    """Publish the validated spool file and record it as a version of `name` (or find the same bytes there)."""
    signature_, symbols = inspect_graph(upload.path)
    already_stored = artifacts.exists(upload.sha256)
    key = artifacts.put_file(upload.path, upload.sha256)
    graph = UploadedGraph(upload.sha256, upload.size_bytes, key, signature_, symbols)
    try:
        with db.session() as session:
            return model_store.add_version(session, tenant, name, graph)
    except IntegrityError:
        _drop_if_unused(db, artifacts, key, already_stored)
        raise ApiError(409, f"model {name!r} was changed by a concurrent request; retry the upload") from None
    except BaseException:
        _drop_if_unused(db, artifacts, key, already_stored)
        raise


def _drop_if_unused(db: Database, artifacts: ArtifactStore, key: str, already_stored: bool) -> None:
    if already_stored:
        return
    with db.session() as session:
        unused = key in model_store.unreferenced(session, {key})
    if unused:
        artifacts.delete(key)
