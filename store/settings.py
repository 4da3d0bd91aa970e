"""The platform's one configuration: every field read from the environment with the prefix `LUMINAL_`."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from luminal.store.artifacts import ArtifactLocation, parse_artifact_url

MiB = 2**20


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LUMINAL_", extra="ignore")

    # Everything the embedded platform writes (SQLite file, artifacts, upload spool) lives under one folder,
    # so one path is all that must survive a restart or be wiped in a test.
    data_dir: Path = Field(default=Path.home() / ".luminal", description="root of the platform's local state")
    # Empty means the embedded default: a SQLite file under data_dir. Set it to postgresql+psycopg://... when
    # several gateway replicas share one metadata store.
    database_url: str = Field(default="", description="SQLAlchemy URL of the metadata database")
    # Uploads are streamed to disk and refused past this size (413) so a client cannot fill the disk; 2 GiB
    # holds a ~1B-parameter float16 model. The graph format's own cap (tens of GiB) is far above it.
    max_upload_bytes: int = Field(default=2048 * MiB, gt=0, description="largest accepted .lgraph upload")
    # An inference request's body (JSON or binary tensors) is read into memory, so it has its own, smaller cap.
    max_request_bytes: int = Field(default=64 * MiB, gt=0, description="largest accepted inference request body")
    # The Open Inference Protocol over gRPC (tritonclient.grpc, KServe v2 gRPC) beside REST, in the same process
    # and on the same event loop; off by default because a second listening port is a second thing to secure.
    grpc_port: int = Field(default=0, ge=0, le=65535, description="gRPC inference port (0: no gRPC server)")
    grpc_host: str = Field(default="127.0.0.1", description="address the gRPC server listens on")
    # Billing multiplies billed GPU-seconds by these; the keys are also the GPU types a deployment may ask for,
    # those with a compiler target of the same name (a10g has none yet: a deploy on it is refused, naming why).
    # The GPU rates are of the order of serverless GPU clouds' list prices (e.g. $4.54/h for an H200).
    gpu_prices_per_second: dict[str, float] = Field(
        default={
            "cpu": 0.00001,
            "t4": 0.000164,
            "a10g": 0.000306,
            "l4": 0.000222,
            "a100": 0.000833,
            "h100": 0.00123,
            "h200": 0.001261,
        },
        description="USD per GPU-second by GPU type",
    )
    # The first start creates a tenant with this key when set (else a random one, printed once), so scripted
    # setups and tests know the key in advance.
    bootstrap_key: str | None = Field(default=None, min_length=20, description="API key of the first tenant")
    # Compiles are CPU-heavy and run beside request handling; one at a time keeps inference responsive.
    compile_workers: int = Field(default=1, ge=1, le=64, description="concurrent compile jobs")
    # "process": compile jobs in child processes (the default: a compile neither holds the gateway's GIL nor can
    # crash it); "thread": in this process; "celery": sent to Celery workers (`luminal compile-worker`) on the
    # Redis broker at compile_broker_url, for compiles that run on other machines than the gateway.
    compile_runner: str = Field(
        default="process", pattern="^(process|thread|celery)$", description="process, thread or celery"
    )
    # Empty means queue_url: the Redis that carries the request queues carries the compile tasks too.
    compile_broker_url: str = Field(default="", description="Celery broker (redis://host:port/db) of compile jobs")
    # A compile task is acknowledged when it ends, so one whose worker died is redelivered, but only once it has
    # gone unacknowledged this long; it must exceed the longest compile (an LLM's can take many minutes), or a
    # second worker starts the same compile beside the first (harmless, the first outcome wins, but wasted work).
    compile_visibility_timeout_s: float = Field(
        default=4 * 3600.0, gt=0, le=7 * 86400, description="seconds before an unacknowledged compile is redelivered"
    )
    # A compile that kills its worker every time (out of memory) is failed after this many deliveries, not
    # redelivered forever.
    compile_max_attempts: int = Field(default=3, ge=1, le=100, description="deliveries of one compile job")
    # /metrics names every tenant's models, so a reachable gateway should guard it; unset, it is open (the
    # embedded single-user default). At least 16 characters: it is a shared secret, not a password to remember.
    metrics_token: str | None = Field(default=None, min_length=16, description="bearer token that /metrics requires")
    # Opens the admin API (/v1/admin: tenants, suspensions, quotas) to `Authorization: Bearer <this token>`;
    # unset, the admin API is disabled. Never a tenant's key: it acts on every tenant.
    admin_token: str | None = Field(default=None, min_length=16, description="bearer token of the admin API")
    # Signs webhook deliveries (Luminal-Signature). Unset, one is generated on the first start and kept under
    # data_dir, so receivers keep verifying across restarts; replicas that share no data_dir must all set it.
    webhook_secret: str | None = Field(default=None, min_length=16, description="HMAC key of webhook signatures")
    # Webhooks go only to public addresses, so a client's URL cannot reach the platform's own network (the cloud
    # metadata service, Redis, the database, this gateway). True lets them reach loopback and private addresses
    # too: for local development and tests, never on a gateway that strangers can call.
    webhook_allow_private: bool = Field(default=False, description="allow webhooks to private and loopback addresses")

    # How long a gateway trusts what it read about an API key or a ready deployment. Changes made through any
    # gateway apply at once: each is published on Redis and clears every gateway's caches
    # (gateway/metadata_changes.py). This bounds staleness only while a gateway is cut off from Redis.
    metadata_cache_s: float = Field(default=2.0, ge=0, le=60, description="seconds metadata lookups are cached")
    # Admission control: a deployment's queue holds at most this many waiting requests; more are answered 429.
    max_queue_depth: int = Field(default=512, ge=1, le=1_000_000, description="queued requests per deployment")
    # A request with no `timeout` of its own must start executing within this many seconds, or it is answered
    # 504 without being executed; a client's own timeout is capped by it.
    request_timeout_s: float = Field(default=60.0, gt=0, le=3600, description="longest wait before execution")
    # A language-model sequence goes to the worker caching the longest prefix of its prompt, else the least loaded
    # (scheduler/sequences/routing.py); off, any worker with room takes it (benchmarks compare the two).
    prefix_routing: bool = Field(default=True, description="route LLM sequences by prefix-cache affinity")
    # The dashboard's charts (/dashboard): this gateway samples its own metrics every dashboard_sample_s and keeps
    # the last dashboard_points samples per deployment (the default: one hour at 5 s, about 60 KiB a deployment).
    dashboard_sample_s: float = Field(default=5.0, ge=0.1, le=3600, description="seconds between dashboard samples")
    dashboard_points: int = Field(default=720, ge=2, le=100_000, description="dashboard samples kept per deployment")
    # How long the gateway waits for a batch to run once it has started, before it answers 504.
    execution_timeout_s: float = Field(default=300.0, gt=0, le=86400, description="longest batch execution")
    # A delivery left unacknowledged this long is taken over by another worker (its worker died or hung).
    reclaim_idle_s: float = Field(default=30.0, gt=0, description="seconds before a stuck delivery is reclaimed")
    # Where workers run: "thread" (in the serving process; the embedded default), "process" (local worker
    # processes), "kubernetes" (a worker Deployment per deployment) or "ec2" (tagged instances). All but "thread"
    # need a queue and database other machines reach (LUMINAL_QUEUE_URL=redis://..., PostgreSQL).
    worker_backend: str = Field(
        default="thread", pattern="^(thread|process|kubernetes|ec2)$", description="thread, process, kubernetes, ec2"
    )
    # Workers on Kubernetes run one of these images, then `worker_command` with the deployment id, a worker id and
    # the GPU type appended (as `python -m luminal.scheduler.worker_process`): a CPU deployment's the platform's
    # image (deploy/docker/platform.Dockerfile), a GPU deployment's the CUDA worker's (cuda-worker.Dockerfile).
    # No image is published: the operator builds both, pushes them to a registry and names them here (the defaults
    # are the tags those files build, which a local cluster can load without a registry).
    worker_image: str = Field(
        default="luminal-cloud:0.1.0",
        description="image of CPU deployments' workers: deploy/docker/platform.Dockerfile, built and pushed by the "
        "operator (none is published)",
    )
    gpu_worker_image: str = Field(
        default="luminal-cloud-cuda-worker:0.1.0",
        description="image of GPU deployments' workers: deploy/docker/cuda-worker.Dockerfile, built and pushed by "
        "the operator (none is published)",
    )
    worker_command: list[str] = Field(
        default=["python", "-m", "luminal.scheduler.worker_process"], min_length=1, description="worker argv prefix"
    )
    # Kubernetes: the namespace worker Deployments live in (the provisioner's Role grants it nothing else), the
    # Secret whose keys (LUMINAL_DATABASE_URL, LUMINAL_QUEUE_URL, LUMINAL_ARTIFACT_URL, ...) become the workers'
    # environment, so no credential is written into a Deployment, and the node label a GPU type selects.
    kubernetes_namespace: str = Field(default="luminal", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    kubernetes_worker_secret: str = Field(default="luminal-worker-env", pattern=r"^[a-z0-9]([-a-z0-9.]{0,251})$")
    kubernetes_gpu_label: str = Field(default="luminal.dev/gpu-type", description="node label naming a GPU type")
    # EC2: the instance type started for each GPU type (a type missing here is refused, naming why), the AMI
    # (one with Python 3.11+ and its venv module, the NVIDIA driver of CUDA 13 for GPU workers, gcc for CPU ones),
    # where the instances go, and the instance profile whose role reads the artifacts. Credentials and region come
    # from the standard AWS settings (AWS_* variables).
    ec2_instance_types: dict[str, str] = Field(
        default={
            "cpu": "c7i.2xlarge",
            "t4": "g4dn.xlarge",
            "a10g": "g5.xlarge",
            "l4": "g6.xlarge",
            "a100": "p4d.24xlarge",
            "h100": "p5.48xlarge",
            "h200": "p5en.48xlarge",
        },
        description="EC2 instance type by GPU type",
    )
    ec2_ami_id: str = Field(default="", description="AMI of worker instances (required for the ec2 backend)")
    ec2_subnet_id: str = Field(default="", description="subnet of worker instances; empty: the default VPC's")
    ec2_security_group_ids: list[str] = Field(default=[], description="security groups of worker instances")
    ec2_instance_profile: str = Field(default="", description="IAM instance profile name of worker instances")
    # What the user data installs: the luminal-cloud wheel built from this repository (`pip wheel --no-deps .`),
    # at an http(s) URL the instances can read (a bucket's object, a presigned S3 URL, an internal file server);
    # none is published on any index. GPU instances install it with the `cuda` extra. And the Secrets Manager
    # secret (a JSON object of LUMINAL_* variables: database, queue and artifact URLs) the instance reads with its
    # profile's role at boot: user data is readable by anyone on the instance and by DescribeInstanceAttribute, so
    # it carries no credential.
    ec2_worker_wheel_url: str = Field(
        default="",
        description="http(s) URL of the luminal-cloud wheel EC2 workers install, built by the operator (none is "
        "published); required for the ec2 backend",
    )
    ec2_worker_secret: str = Field(default="luminal/worker-env", description="Secrets Manager id of the worker env")
    # Autoscaling: requests (queued + executing) per replica before another starts; idle time before a
    # deployment with min_replicas 0 scales to zero; the cooldowns between scaling steps.
    scale_target_per_replica: float = Field(default=16.0, gt=0, description="requests per replica")
    scale_to_zero_after_s: float = Field(default=300.0, ge=0, description="idle seconds before zero replicas")
    scale_up_cooldown_s: float = Field(default=2.0, ge=0, description="seconds between scale-ups")
    scale_down_cooldown_s: float = Field(default=30.0, ge=0, description="seconds between scale-downs")
    # Empty means the embedded default: in-memory queues inside this process. Several gateway replicas and
    # workers on other machines share requests through Redis Streams instead (the worker registry too).
    queue_url: str = Field(
        default="",
        description="request queues: empty = in-memory queues of the embedded platform; "
        "redis://host:port/db = Redis Streams",
    )

    # On Redis, one gateway's provisioner acts for all: the holder of this lease, renewed at half of it; the others
    # try to take it every quarter of it, so one takes over that soon after a graceful stop (which releases it), and
    # a lease's length after a holder's death. Short hands over sooner; long rides out longer stalls of a holder.
    provisioner_lease_s: float = Field(default=10.0, gt=0, le=3600, description="the provisioner lease's length")

    # On Redis, a gateway renews a lease on the language-model sequences it relays (at a third of this); killed, its
    # sequences' workers drop them once the lease lapses. Short frees a dead gateway's cache blocks sooner; long
    # outlasts longer pauses of a live gateway (a dropped sequence's reader gets an error, never a hang).
    reader_lease_s: float = Field(default=10.0, gt=0, le=3600, description="a gateway's lease on its sequences")

    # Prefixes every Redis key, so several platforms (or test runs) can share one Redis server.
    queue_namespace: str = Field(default="lm", pattern=r"^[A-Za-z0-9_.\-]{1,64}$", description="Redis key prefix")
    # Names this gateway among several on one database (its heartbeat, the predictions it runs, the provisioner
    # lease). Empty: the id kept in data_dir, made on the first start. Gateways that share a data_dir need one each.
    gateway_id: str = Field(default="", pattern=r"^[A-Za-z0-9_.\-]{0,128}$", description="this gateway's replica id")

    # Retention. A finished prediction (its stored output included) is deleted this long after it finished, so
    # the database and artifact store do not grow forever. One hour, as Replicate keeps an API prediction's
    # inputs and outputs: ample for a poll or a webhook's retries; a client that needs the result longer keeps
    # its own copy. At most 30 days.
    prediction_retention_s: float = Field(
        default=3600.0, gt=0, le=30 * 86400, description="seconds a finished prediction is kept"
    )
    # A blob nothing references is removed once older than this: a crash between the artifact store and the
    # database orphans it. Younger ones may belong to an upload, compile or prediction committing its row.
    orphan_grace_s: float = Field(default=3600.0, ge=60, description="age before an unreferenced blob is removed")
    sweep_interval_s: float = Field(default=300.0, gt=0, description="seconds between retention sweeps")

    # Empty means the embedded default: a folder under data_dir. s3://bucket/prefix when gateways and workers run
    # on several machines (the bucket must exist; boto3 reads AWS_ENDPOINT_URL, the keys and the region itself).
    artifact_url: str = Field(
        default="", description="artifact store: empty = data_dir/artifacts; /path or file:///path; s3://bucket/prefix"
    )
    # Each machine's verified copies of a remote store's blobs: on a disk that outlives the worker, so a worker
    # that starts again does not download its program again. Empty means data_dir/artifact-cache.
    artifact_cache_dir: Path | None = Field(default=None, description="local read-through cache of remote artifacts")
    # A machine that serves many models in turn would fill its disk with programs it no longer runs: past this
    # many bytes the least recently used blobs are deleted (fetched again if needed). 0: no limit.
    artifact_cache_bytes: int = Field(default=0, ge=0, description="size limit of the artifact cache; 0 = none")
    # Larger files go up to S3 in parts of this size (and come down as ranged reads of it). S3 refuses parts under
    # 5 MiB (but the last) and allows 10,000 parts: 64 MiB parts hold files up to 625 GiB.
    artifact_part_size: int = Field(
        default=64 * MiB, ge=5 * MiB, le=5 * 1024 * MiB, description="S3 multipart part size in bytes"
    )

    @field_validator("artifact_url")
    @classmethod
    def _artifact_url_is_known(cls, url: str) -> str:
        parse_artifact_url(url)  # raises ValueError naming what is wrong
        return url

    @field_validator("ec2_worker_wheel_url")
    @classmethod
    def _wheel_url_is_one(cls, url: str) -> str:
        # The user data installs `luminal-cloud @ URL`: anything but a wheel's URL would fail on the instance, where
        # nobody sees it, so it is refused here.
        parts = urlsplit(url)
        wheel = parts.scheme in ("http", "https") and parts.path.endswith(".whl") and not any(c.isspace() for c in url)
        if url and not wheel:
            raise ValueError(f"must be an http(s) URL of a .whl file, got {url[:200]!r}")
        return url

    @property
    def artifact_location(self) -> ArtifactLocation:
        cache = self.artifact_cache_dir or self.data_dir / "artifact-cache"
        return ArtifactLocation(
            self.artifact_url, self.artifacts_dir, cache, self.artifact_part_size, self.artifact_cache_bytes
        )

    @cached_property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'luminal.db'}"

    @property
    def resolved_compile_broker_url(self) -> str:
        return self.compile_broker_url or self.queue_url

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def spool_dir(self) -> Path:
        # Beside the artifacts (same filesystem), so a validated upload moves into place with one rename.
        return self.data_dir / "spool"
