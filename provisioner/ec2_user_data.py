"""The user data an EC2 worker boots with: a shell script that installs the luminal-cloud wheel from
`settings.ec2_worker_wheel_url` (with the `cuda` extra on a GPU instance) in a virtual environment, writes the
worker's environment from a Secrets Manager secret (with the instance profile's role, so no credential is in the
user data, which is readable from the instance and through the EC2 API), and runs the worker as a systemd service
under an unprivileged user of its own, which stops it with SIGTERM (the batch being executed finishes) and
restarts it if it dies. The instance shuts down (and, started with that behaviour, terminates) if the
installation fails, rather than idling as a billed instance without a worker.
"""

from __future__ import annotations

import json
import re
import shlex

from luminal.provisioner.device_offer import CPU
from luminal.provisioner.worker_settings import worker_settings
from luminal.store.settings import Settings

# What may appear unquoted in the systemd unit's command line: ids, module paths, GPU types. Anything else in a
# worker command is refused rather than escaped into a root-run script.
_PLAIN = re.compile(r"^[A-Za-z0-9_./=:@+-]+$")
VENV = "/opt/luminal"
ENV_FILE = "/etc/luminal/worker.env"

_WRITE_ENV = """\
import json, re, boto3
secret = boto3.client("secretsmanager", region_name={region}).get_secret_value(SecretId={secret})
env = {{**json.loads(secret["SecretString"]), **{fixed}}}
lines = []
for key, value in env.items():
    if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", key):
        raise SystemExit("refusing the environment variable name " + repr(key))
    quoted = str(value).replace("\\\\", "\\\\\\\\").replace('"', '\\\\"').replace("\\n", " ")
    lines.append(key + '="' + quoted + '"')
with open({env_file}, "w") as out:
    out.write("\\n".join(lines) + "\\n")
"""


def user_data(settings: Settings, deployment_id: int, worker_id: str, gpu_type: str, region: str) -> str:
    command = [*settings.worker_command, str(deployment_id), worker_id, gpu_type]
    refused = [part for part in command if not _PLAIN.match(part)]
    if refused:
        raise ValueError(f"the worker command may hold only plain words on EC2, got {refused}")
    fixed = {  # over the secret's keys of the same names
        **worker_settings(settings),
        "LUMINAL_DATA_DIR": "/var/lib/luminal",  # systemd's StateDirectory, owned by the service's user
        "PATH": f"{VENV}/bin:/usr/local/bin:/usr/bin:/bin",
    }
    # json.dumps of strings and of a dict of strings is a Python literal too; in a quoted heredoc nothing expands.
    write_env = _WRITE_ENV.format(
        region=json.dumps(region), secret=json.dumps(settings.ec2_worker_secret), fixed=json.dumps(fixed),
        env_file=json.dumps(ENV_FILE),
    )  # fmt: skip
    stop_s = int(settings.execution_timeout_s) + 30
    # No index has luminal-cloud: pip takes the wheel the operator built and put at that URL, with CuPy, NVRTC and
    # cuBLAS for a GPU instance.
    extra = "" if gpu_type == CPU else "[cuda]"
    package = f"luminal-cloud{extra} @ {settings.ec2_worker_wheel_url}"
    return f"""#!/bin/bash
# Luminal worker {worker_id} of deployment {deployment_id} ({gpu_type}).
set -euo pipefail
trap 'shutdown -h now' ERR
mkdir -p /etc/luminal
python3 -m venv {VENV}
{VENV}/bin/pip install --quiet {shlex.quote(package)}
{VENV}/bin/python - <<'PY'
{write_env}PY
chmod 600 {ENV_FILE}
cat > /etc/systemd/system/luminal-worker.service <<'UNIT'
[Unit]
Description=Luminal worker {worker_id}
After=network-online.target
Wants=network-online.target

[Service]
EnvironmentFile={ENV_FILE}
ExecStart=/usr/bin/env {" ".join(command)}
# An unprivileged user of its own; the environment file is read by systemd before privileges drop.
DynamicUser=yes
StateDirectory=luminal
KillSignal=SIGTERM
TimeoutStopSec={stop_s}
Restart=on-failure
RestartSec=5

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now luminal-worker.service
"""
