"""Workers on EC2 (`LUMINAL_WORKER_BACKEND=ec2`): one tagged instance per worker, through boto3.

A worker is an instance of the type `settings.ec2_instance_types` gives its GPU type (h100 -> p5.48xlarge),
tagged `luminal:deployment`, `luminal:gpu-type` and `luminal:worker-id`, booting with user data that installs and
starts the worker (`ec2_user_data`). It is alive while its instance is pending or running; it is ready once the
worker registered itself ready (through the shared Redis registry, as a local worker process does); stopping it
terminates the instance. `replicas` counts a deployment's pending and running instances by their tags, which
survive a restart of the provisioner: a live instance that no handle holds (a crashed provisioner's) and that
serves as asked (tag `luminal:serves`) is adopted by the next start instead of a new launch.

boto3 is imported lazily (the `ec2` extra); credentials, region and endpoint are the standard AWS settings.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from luminal.provisioner.backends import WorkerHandle, checked_device, serves_hash
from luminal.provisioner.device_offer import DeviceOffer
from luminal.provisioner.ec2_user_data import user_data
from luminal.scheduler.registry import WorkerRegistry
from luminal.scheduler.worker import new_worker_id
from luminal.scheduler.worker_spec import WorkerSpec
from luminal.store.clock import SYSTEM_CLOCK, Clock
from luminal.store.settings import Settings

log = logging.getLogger(__name__)
MANAGED_BY = "luminal-provisioner"
LIVE_STATES = ("pending", "running")


class _InstanceHandle:
    def __init__(
        self,
        backend: Ec2Workers,
        instance_id: str,
        worker_id: str,
        spec: WorkerSpec,
        clock: Clock,
        spawned_at: float | None = None,  # wall clock of the launch; None: now
    ):
        self.worker_id, self.deployment_id, self.spec = worker_id, spec.deployment_id, spec
        self.instance_id = instance_id
        self.started_at = clock.monotonic()
        # Wall clock, comparable with the ready time the worker registers.
        self._spawned_at = clock.time() if spawned_at is None else spawned_at
        self._backend = backend
        self._cold_start: float | None = None
        self._stopped = False

    def alive(self) -> bool:
        return not self._stopped and self.instance_id in self._backend.live_instances()

    def cold_start_seconds(self) -> float | None:
        if self._cold_start is None:
            workers = self._backend.registry.workers(self.deployment_id)
            info = next((w for w in workers if w.worker_id == self.worker_id), None)
            if info is not None and info.ready_at is not None:
                # From the launch request: the boot and the installation are the cold start of a VM worker.
                self._cold_start = info.ready_at - self._spawned_at
        return self._cold_start

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._backend.terminate([self.instance_id])

    def join(self, timeout: float) -> bool:
        return True  # the instance's shutdown stops the worker's service gracefully; EC2 carries it out


class Ec2Workers:
    def __init__(
        self,
        settings: Settings,
        registry: WorkerRegistry,
        client: Any = None,  # a boto3 EC2 client; None: one from the standard AWS settings
        clock: Clock = SYSTEM_CLOCK,
        status_ttl_s: float = 5.0,  # the provisioner asks every handle each tick: one DescribeInstances serves all
    ):
        if not settings.ec2_ami_id:
            raise ValueError("the ec2 worker backend needs an AMI: set LUMINAL_EC2_AMI_ID")
        if not settings.ec2_worker_wheel_url:
            raise ValueError(
                "the ec2 worker backend needs the URL of the luminal-cloud wheel its instances install (built from "
                "the repository: none is published): set LUMINAL_EC2_WORKER_WHEEL_URL"
            )
        if client is None:
            import boto3

            client = boto3.client("ec2")
        self.settings, self.registry, self.ec2, self.clock = settings, registry, client, clock
        self.status_ttl_s = status_ttl_s
        self.offer = DeviceOffer(
            provider="the EC2 backend (LUMINAL_EC2_INSTANCE_TYPES)",
            remote_types=frozenset(settings.ec2_instance_types),
        )
        self._live: tuple[float, frozenset[str]] | None = None
        self._unterminated: set[str] = set()  # instances whose termination failed, tried again
        self._held: set[str] = set()  # instances a handle of this backend holds
        self.prune_every_s, self._pruned_at = 60.0, float("-inf")
        self._lock = threading.Lock()

    def start(self, spec: WorkerSpec) -> WorkerHandle:
        gpu_type = checked_device(self.offer, spec)
        adopted = self._adopt(spec)
        if adopted is not None:
            return adopted
        worker_id = new_worker_id(spec.deployment_id)
        script = user_data(self.settings, spec.deployment_id, worker_id, gpu_type, self.ec2.meta.region_name)
        tags = {
            "Name": f"luminal-worker-d{spec.deployment_id}",
            "luminal:deployment": str(spec.deployment_id),
            "luminal:gpu-type": gpu_type,
            "luminal:worker-id": worker_id,
            "luminal:managed-by": MANAGED_BY,
            "luminal:serves": serves_hash(spec),
        }
        launch: dict[str, Any] = {
            "ImageId": self.settings.ec2_ami_id,
            "InstanceType": self.settings.ec2_instance_types[gpu_type],
            "MinCount": 1,
            "MaxCount": 1,
            "UserData": script,
            "ClientToken": worker_id,  # a retried launch starts no second instance
            "InstanceInitiatedShutdownBehavior": "terminate",  # a failed installation shuts down: it goes
            "MetadataOptions": {"HttpTokens": "required"},  # IMDSv2 only
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            ],
        }
        if self.settings.ec2_subnet_id:
            launch["SubnetId"] = self.settings.ec2_subnet_id
        if self.settings.ec2_security_group_ids:
            launch["SecurityGroupIds"] = list(self.settings.ec2_security_group_ids)
        if self.settings.ec2_instance_profile:
            launch["IamInstanceProfile"] = {"Name": self.settings.ec2_instance_profile}
        (instance,) = self.ec2.run_instances(**launch)["Instances"]
        log.info("deployment %s: started instance %s for worker %s", spec.deployment_id, instance["InstanceId"],
                 worker_id)  # fmt: skip
        handle = _InstanceHandle(self, instance["InstanceId"], worker_id, spec, self.clock)
        with self._lock:
            self._live = None  # the next liveness question reads the new instance too
            self._held.add(handle.instance_id)
        return handle

    def _adopt(self, spec: WorkerSpec) -> WorkerHandle | None:
        """A live instance of the deployment serving as `spec` asks that no handle holds (one a provisioner
        before this one started, which crashed): it is taken over instead of launching another, so it is not
        left running, billed and unmanaged."""
        serves = serves_hash(spec)
        for instance in self._described(spec.deployment_id):
            tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
            with self._lock:
                if instance["InstanceId"] in self._held or tags.get("luminal:serves") != serves:
                    continue
                self._held.add(instance["InstanceId"])
            launched = instance["LaunchTime"].timestamp()
            handle = _InstanceHandle(self, instance["InstanceId"], tags.get("luminal:worker-id", ""), spec,
                                     self.clock, spawned_at=launched)  # fmt: skip
            log.info("deployment %s: adopted instance %s", spec.deployment_id, handle.instance_id)
            return handle
        return None

    def prune(self, keep: set[int]) -> None:
        """Terminate the live instances of deployments not in `keep` that no handle holds (a crashed
        provisioner's, whose deployment was deleted since); at most once per `prune_every_s`."""
        now = self.clock.monotonic()
        with self._lock:
            if now - self._pruned_at < self.prune_every_s:
                return
            self._pruned_at = now
        try:
            described = self._described(None)
        except Exception:  # tried again at the next prune
            log.exception("could not list the worker instances to prune")
            return
        orphans = []
        for instance in described:
            tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
            deployment = tags.get("luminal:deployment", "")
            with self._lock:
                held = instance["InstanceId"] in self._held
            if not held and not (deployment.isdigit() and int(deployment) in keep):
                orphans.append(instance["InstanceId"])
        if orphans:
            log.info("terminating instances of deployments no longer served: %s", orphans)
            self.terminate(orphans)

    def instances(self, deployment_id: int | None = None) -> dict[str, str]:
        """Instance id -> worker id of the pending and running workers (of one deployment, or all)."""
        found = {}
        for instance in self._described(deployment_id):
            tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
            found[instance["InstanceId"]] = tags.get("luminal:worker-id", "")
        return found

    def _described(self, deployment_id: int | None) -> list[dict]:
        """The pending and running worker instances as DescribeInstances gives them, oldest first."""
        filters = [
            {"Name": "tag:luminal:managed-by", "Values": [MANAGED_BY]},
            {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
        ]
        if deployment_id is not None:
            filters.append({"Name": "tag:luminal:deployment", "Values": [str(deployment_id)]})
        pages = self.ec2.get_paginator("describe_instances").paginate(Filters=filters)
        found = [i for page in pages for reservation in page["Reservations"] for i in reservation["Instances"]]
        return sorted(found, key=lambda i: i["LaunchTime"])

    def replicas(self, deployment_id: int) -> int:
        """How many of the deployment's instances are pending or running."""
        return len(self.instances(deployment_id))

    def live_instances(self) -> frozenset[str]:
        """The ids of every pending or running worker instance, read at most once per `status_ttl_s`."""
        now = self.clock.monotonic()
        with self._lock:
            if self._live is not None and now - self._live[0] < self.status_ttl_s:
                return self._live[1]
        with self._lock:
            retry, self._unterminated = self._unterminated, set()
        if retry:
            self.terminate(sorted(retry))
        try:
            live = frozenset(self.instances())
        except Exception:
            with self._lock:
                if self._live is None:
                    raise  # nothing known: no worker may be taken for dead (and replaced) on a guess
                log.exception("could not list the worker instances; keeping the last list")
                return self._live[1]
        with self._lock:
            self._live = (now, live)
        return live

    def terminate(self, instance_ids: list[str]) -> None:
        """Terminate them; one already gone is no error."""
        with self._lock:
            self._held.difference_update(instance_ids)
        try:
            self.ec2.terminate_instances(InstanceIds=instance_ids)
        except Exception as error:
            code = getattr(error, "response", {}).get("Error", {}).get("Code", "")
            if code != "InvalidInstanceID.NotFound":
                # Its handle is gone from the provisioner, so the instance would run on, billed: try again at
                # the next refresh of the instance list.
                log.exception("could not terminate %s; will try again", instance_ids)
                with self._lock:
                    self._unterminated.update(instance_ids)
                return
        with self._lock:
            self._live = None
