"""One container (a pod's, or a VM's systemd service) run as a local process, as its runtime would run it: exactly
the given command and environment (nothing of the test's own), in a mount namespace of its own whose volumes
(emptyDir, systemd's StateDirectory) are fresh directories bound over their mount paths, so what the process writes
to /var/lib/luminal or /tmp is its own and the test's /tmp is out of its sight (as another machine's disk is).

Stopping is the runtime's: SIGTERM, then SIGKILL once the grace period has passed. Binding needs root and
`unshare`; without them the tests that use it skip, saying so.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

# Every container's image is this checkout and its virtual environment (as the worker image is built from it).
# A volume over a folder that holds them (a fresh /tmp over a checkout cloned under /tmp) must not hide them, as
# no volume hides an image's own files: each is opened before the volumes are bound and bound back after.
IMAGE = (Path(__file__).resolve().parents[2], Path(sys.prefix).resolve())

# Open each image path (kept, up to the first --), bind each volume over its mount path (made if absent, as a
# container runtime makes mount points), bind the image paths back through their open descriptors (not their
# names, which the volumes may now hide: hence --no-canonicalize), then become the command: the process the
# runtime signals is the container's own.
_MOUNT_THEN_EXEC = (
    'fd=3; kept=""; while [ "$1" != -- ]; do eval "exec $fd<\\"\\$1\\"" || exit 1; kept="$kept $fd:$1"; '
    "fd=$((fd + 1)); shift; done; shift; "
    'while [ "$1" != -- ]; do mkdir -p "$2" && mount --bind "$1" "$2" || exit 1; shift 2; done; shift; '
    'for k in $kept; do f=${k%%:*}; p=${k#*:}; mkdir -p "$p" && mount --no-canonicalize --bind "/proc/self/fd/$f" '
    '"$p" || exit 1; eval "exec $f<&-"; done; '
    'exec "$@"'
)


def require_mount_namespaces() -> None:
    """Skip unless this machine lets the test give each container its own volumes."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("running workers as containers here needs root and `unshare` (util-linux), to mount volumes")


def mount_order(mounts: dict[str, Path]) -> list[tuple[str, Path]]:
    """A mount over a folder that holds another volume's host directory (the test's /tmp) goes last: bound first,
    it would hide that directory from the binds after it."""

    def hides_a_host_folder(path: str) -> bool:
        return any(str(host).startswith(path.rstrip("/") + "/") for host in mounts.values())

    return sorted(mounts.items(), key=lambda mount: hides_a_host_folder(mount[0]))


class Container:
    def __init__(self, argv: list[str], env: dict[str, str], mounts: dict[str, Path], log: Path,
                 image: tuple[Path, ...] = IMAGE):  # fmt: skip
        """`mounts`: mount path -> the host directory that backs it; `image`: the host paths the image shares."""
        if not argv:
            raise ValueError("a container needs a command")
        self.argv, self.env, self.mounts, self.log, self.image = argv, env, mounts, log, image
        self.process: subprocess.Popen | None = None
        self.stop_requested_at: float | None = None
        self.starts = 0

    def start(self) -> None:
        for host in self.mounts.values():
            host.mkdir(parents=True, exist_ok=True)
        binds = [str(part) for path, host in mount_order(self.mounts) for part in (host, path)]
        kept = [str(p) for p in self.image if not any(str(p).startswith(f"{other}/") for other in self.image)]
        if any(" " in path for path in kept):  # the script splits its list of kept paths on spaces
            raise ValueError(f"the image paths may not hold spaces: {kept}")
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _MOUNT_THEN_EXEC, "sh", *kept, "--",
                   *binds, "--", *self.argv]  # fmt: skip
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(command, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd="/", start_new_session=True)  # fmt: skip
        self.stop_requested_at, self.starts = None, self.starts + 1

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self) -> None:
        """SIGTERM now; `enforce_grace` kills it once the grace period passed."""
        if self.running() and self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic()
            self.process.send_signal(signal.SIGTERM)

    def enforce_grace(self, grace_s: float) -> None:
        if self.running() and self.stop_requested_at is not None:
            if time.monotonic() - self.stop_requested_at > grace_s:
                self.process.kill()

    def kill(self) -> None:
        """What a test does to a container: SIGKILL, no chance to clean up."""
        if self.running():
            self.process.kill()
            self.process.wait(10)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def describe(self) -> str:
        """Its state and its log's end: what a failed wait for it should say."""
        return (f"pid {self.pid}, running {self.running()}, exit code {self.exit_code()}, started {self.starts} "
                f"time(s); its log ends:\n{self.tail(1500)}")  # fmt: skip


class NodeLoop:
    """A node's control loop: `step` every `poll_s` on a thread of its own (an error is kept and the next step reads
    again, as a kubelet or an init system carries on); closed, every container it holds is stopped."""

    def __init__(self, name: str, poll_s: float):
        self.poll_s, self.errors = poll_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def step(self) -> None:
        raise NotImplementedError

    def take_all(self) -> list[Container]:
        """Every container it holds, forgotten by it."""
        raise NotImplementedError

    def report(self, worker_id: str) -> str:
        """What the node knows of the worker's containers, and its loop's last errors."""
        raise NotImplementedError

    def _errors(self) -> str:
        return f"node loop errors ({len(self.errors)}), the last 3 cut: {[e[:300] for e in self.errors[-3:]]}"

    def start(self):
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        every = self.take_all()
        for container in every:
            container.stop()
        for container in every:
            if container.process is not None:
                try:
                    container.process.wait(30)
                except subprocess.TimeoutExpired:
                    container.kill()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.step()
            except Exception as error:
                self.errors.append(f"{type(error).__name__}: {error}")
