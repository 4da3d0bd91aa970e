"""The scale-out tests run on the local PostgreSQL, Redis and a real S3 server (rclone serve s3)."""

from tests.gateway.conftest import model_bytes, postgres_database  # noqa: F401
from tests.scheduler.queue_fixtures import redis_namespace  # noqa: F401
from tests.store.s3_server import s3_server  # noqa: F401
