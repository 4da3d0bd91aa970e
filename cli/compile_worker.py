"""`luminal compile-worker`: a Celery worker that runs the platform's compile jobs (LUMINAL_COMPILE_RUNNER=celery
on the gateways). It reads the same LUMINAL_* settings as `luminal serve`: the broker (LUMINAL_COMPILE_BROKER_URL,
else LUMINAL_QUEUE_URL), the metadata database and the artifact store it writes programs to."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from luminal.cli.common import fail


def compile_worker(
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="compiles run at once (processes)")] = 1,
    data_dir: Annotated[
        Path | None, typer.Option(help="platform state (default $LUMINAL_DATA_DIR or ~/.luminal)")
    ] = None,
    loglevel: Annotated[str, typer.Option(help="Celery log level: debug, info, warning, error")] = "info",
) -> None:
    """Run compile jobs sent by the gateways, until stopped (SIGTERM finishes the compiles under way first)."""
    from pydantic import ValidationError

    from luminal.store.settings import Settings

    try:
        settings = Settings(**({"data_dir": data_dir} if data_dir else {}))
    except ValidationError as e:
        fail(f"invalid LUMINAL_* setting: {e.errors()[0]['loc'][0]}: {e.errors()[0]['msg']}")
    if not settings.resolved_compile_broker_url:
        fail("a compile worker needs a Redis broker: set LUMINAL_COMPILE_BROKER_URL or LUMINAL_QUEUE_URL")
    try:
        import celery  # noqa: F401
    except ImportError:
        fail("compile workers need Celery: pip install 'luminal-cloud[celery]'")
    from luminal.scheduler.compile_tasks import (
        QUEUE,
        CeleryCompileConfig,
        WorkerStores,
        make_celery_app,
        register_compile_task,
    )

    config = CeleryCompileConfig.from_settings(settings)
    try:
        app = make_celery_app(config)
    except ValueError as e:
        fail(str(e))
    stores = WorkerStores(settings.resolved_database_url, settings.artifact_location, settings.spool_dir)
    register_compile_task(app, config, stores)
    argv = ["worker", f"--concurrency={concurrency}", f"--loglevel={loglevel}", f"--queues={QUEUE}"]
    # A node name of its own (several workers may share a host); no mingle or gossip: workers need no peers.
    argv += [f"--hostname=compile-{os.getpid()}@%h", "--without-mingle", "--without-gossip"]
    app.worker_main(argv)
