"""This gateway among several on one database: its replica id, and its heartbeat, which also takes over (fails)
the predictions of replicas that died.

A prediction's inputs live only in the task of the gateway that accepted it, so when that gateway dies nobody
can finish it: another replica notices the dead one's heartbeat expired and marks its unfinished predictions
failed (`INTERRUPTED`), instead of a restart marking every replica's. At start a gateway also fails its own
earlier ones (the id is kept in data_dir, so a restarted gateway is the same replica): nothing of this process
can be running yet.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading

from luminal.store import leases
from luminal.store import predictions as prediction_store
from luminal.store.clock import SYSTEM_CLOCK, Clock
from luminal.store.database import Database
from luminal.store.settings import Settings

log = logging.getLogger(__name__)
HEARTBEAT_TIMEOUT_S = 30.0  # a replica silent this long has died; it beats three times as often


def replica_id(settings: Settings) -> str:
    """The configured gateway id, else the one kept in data_dir (made on the first start: host and random)."""
    if settings.gateway_id:
        return settings.gateway_id
    path = settings.data_dir / "gateway_id"
    if path.exists():
        kept = path.read_text().strip()
        if kept:
            return kept[:128]
    host = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname())[:64] or "gateway"
    made = f"{host}-{secrets.token_hex(6)}"
    path.write_text(made + "\n")
    return made


class ReplicaHeartbeat:
    def __init__(
        self, db: Database, replica_id: str, timeout_s: float = HEARTBEAT_TIMEOUT_S, clock: Clock = SYSTEM_CLOCK
    ):
        if timeout_s <= 0:
            raise ValueError(f"a heartbeat timeout is positive, not {timeout_s}")
        self.db, self.replica_id, self.timeout_s, self.clock = db, replica_id, timeout_s, clock
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="replica-heartbeat", daemon=True)

    def start(self) -> int:
        """Beat, fail this replica's earlier predictions and those of dead replicas, then beat on in a thread;
        returns how many predictions were failed."""
        failed = self.beat(own_earlier=True)
        self._thread.start()
        return failed

    def beat(self, own_earlier: bool = False) -> int:
        """One beat: record this replica alive, and fail the unfinished predictions of replicas that are not
        (with `own_earlier`, this replica's too). Returns how many were failed."""
        now = self.clock.time()
        with self.db.session() as session:
            leases.beat(session, self.replica_id, now)
            live = leases.live_replicas(session, now, self.timeout_s)
            if own_earlier:
                live.discard(self.replica_id)
            failed = prediction_store.fail_orphaned(session, prediction_store.INTERRUPTED, live)
            leases.forget_dead_replicas(session, now, self.timeout_s)
        if failed:
            log.warning("failed %d prediction(s) whose gateway died before finishing them", failed)
        return failed

    def stop(self) -> None:
        """Stop beating (after this gateway's predictions were finished or failed at shutdown)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self.clock.wait(self._stopping, self.timeout_s / 3):
            try:
                self.beat()
            except Exception:  # a database hiccup: the next beat tries again, well before the timeout
                log.exception("replica %s: heartbeat failed", self.replica_id)
