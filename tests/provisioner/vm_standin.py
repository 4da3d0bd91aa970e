"""Virtual machines for moto's EC2: what a worker instance does once it boots, with its systemd service run as a
local process (container_standin.py).

Each step lists the pending and running worker instances moto holds. A new one boots: its user data's environment
script is run (against moto's Secrets Manager, with the test's AWS settings standing in for the instance profile)
writing the service's environment file, and its systemd unit is read: `ExecStart` runs with exactly the
`EnvironmentFile`'s variables, its `StateDirectory` and (DynamicUser's) private /tmp as fresh directories, and
/opt/luminal being the virtual environment the user data's pip would have installed (this checkout's, which holds
the same package). `Restart=on-failure` restarts a service that died after `RestartSec`; an instance that is no
longer live has its service stopped as a shutdown stops it: `KillSignal`, then SIGKILL after `TimeoutStopSec`.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from luminal.provisioner.ec2_user_data import ENV_FILE, VENV
from luminal.provisioner.ec2_workers import LIVE_STATES, MANAGED_BY
from tests.provisioner.container_standin import Container, NodeLoop

_HEREDOC = r"<<'{tag}'\n(.*?)\n{tag}\n"
_ENV_LINE = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"$')


def heredoc(script: str, tag: str) -> str:
    found = re.search(_HEREDOC.format(tag=tag), script, re.S)
    if found is None:
        raise ValueError(f"the user data has no <<'{tag}' document")
    return found.group(1)


def unit_service(unit: str) -> dict[str, str]:
    """The [Service] section's settings (one value each: the worker's unit repeats none)."""
    section, found = "", {}
    for line in unit.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            found[key] = value
    return found


def environment_file(text: str) -> dict[str, str]:
    """systemd's reading of KEY="value" lines, backslash escapes undone."""
    env = {}
    for line in text.splitlines():
        matched = _ENV_LINE.match(line)
        if matched is None:
            raise ValueError(f"systemd would not read the environment line {line!r}")
        env[matched.group(1)] = re.sub(r"\\(.)", r"\1", matched.group(2))
    return env


@dataclass
class Vm:
    instance_id: str
    worker_id: str
    service: Container
    restart: str
    restart_s: float
    stop_s: float
    exited_at: float | None = None
    shut_down: bool = False


class VmStandIn(NodeLoop):
    def __init__(self, ec2: Any, aws_env: dict[str, str], venv: Path, root: Path, poll_s: float = 0.2):
        """`aws_env`: what the instance profile and region give an instance (AWS_* variables)."""
        super().__init__("vm-standin", poll_s)
        self.ec2, self.aws_env, self.venv, self.root = ec2, aws_env, venv, root
        self.vms: dict[str, Vm] = {}
        self.shut: list[Vm] = []
        self._lock = threading.Lock()

    def take_all(self) -> list[Container]:
        with self._lock:
            every, self.vms, self.shut = [*self.vms.values(), *self.shut], {}, []
        return [vm.service for vm in every]

    def workers(self) -> dict[str, Container]:
        """The running worker services, by the worker id their instance was tagged with."""
        with self._lock:
            return {vm.worker_id: vm.service for vm in self.vms.values() if vm.service.running()}

    def report(self, worker_id: str) -> str:
        with self._lock:
            found = [vm for vm in [*self.vms.values(), *self.shut] if vm.worker_id == worker_id]
        lines = [f"instance {vm.instance_id} (shut down {vm.shut_down}, exited at {vm.exited_at}): "
                 f"{vm.service.describe()}" for vm in found]  # fmt: skip
        lines = lines or [f"no instance of worker {worker_id} is booted or shutting down"]
        return "\n".join([*lines, self._errors()])

    def all_stopped(self) -> bool:
        with self._lock:
            every = [*self.vms.values(), *self.shut]
        return not any(vm.service.running() for vm in every)

    def step(self) -> None:
        filters = [{"Name": "tag:luminal:managed-by", "Values": [MANAGED_BY]},
                   {"Name": "instance-state-name", "Values": list(LIVE_STATES)}]  # fmt: skip
        pages = self.ec2.get_paginator("describe_instances").paginate(Filters=filters)
        live = {i["InstanceId"]: i for page in pages for r in page["Reservations"] for i in r["Instances"]}
        for instance_id in live.keys() - self.vms.keys():
            vm = self._boot(live[instance_id])
            with self._lock:
                self.vms[instance_id] = vm
        with self._lock:
            for instance_id in self.vms.keys() - live.keys():
                vm = self.vms.pop(instance_id)
                vm.shut_down = True
                vm.service.stop()
                self.shut.append(vm)
            for vm in self.shut:
                vm.service.enforce_grace(vm.stop_s)
            self.shut = [vm for vm in self.shut if vm.service.running()]
            booted = list(self.vms.values())
        for vm in booted:
            self._restart_if_failed(vm)

    def _boot(self, instance: dict) -> Vm:
        instance_id = instance["InstanceId"]
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
        data = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        script = base64.b64decode(data["UserData"]["Value"]).decode()
        home = self.root / instance_id
        home.mkdir(parents=True, exist_ok=True)
        env_file = home / "worker.env"
        write_env = heredoc(script, "PY").replace(json.dumps(ENV_FILE), json.dumps(str(env_file)))
        subprocess.run([sys.executable, "-c", write_env], env=self.aws_env, check=True, timeout=120)
        service = unit_service(heredoc(script, "UNIT"))
        if service.get("EnvironmentFile") != ENV_FILE or service.get("KillSignal") != "SIGTERM":
            raise ValueError(f"instance {instance_id}: a unit this VM does not run: {service}")
        env = environment_file(env_file.read_text())
        mounts = {VENV: self.venv, "/tmp": home / "tmp"}  # DynamicUser implies PrivateTmp
        if "StateDirectory" in service:
            mounts[f"/var/lib/{service['StateDirectory']}"] = home / "state"
        container = Container(shlex.split(service["ExecStart"]), env, mounts, home / "service.log")
        container.start()
        return Vm(instance_id, tags.get("luminal:worker-id", ""), container, service.get("Restart", "no"),
                  float(service.get("RestartSec", "0.1")), float(service.get("TimeoutStopSec", "90")))  # fmt: skip

    def _restart_if_failed(self, vm: Vm) -> None:
        code = vm.service.exit_code()
        if vm.service.running() or vm.shut_down or code is None:
            return
        if vm.restart not in ("on-failure", "always") or (code == 0 and vm.restart == "on-failure"):
            return
        now = time.monotonic()
        if vm.exited_at is None:
            vm.exited_at = now
        if now - vm.exited_at >= vm.restart_s:
            vm.service.start()
            vm.exited_at = None
