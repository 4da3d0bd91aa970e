"""Which version answers a request that names a model without a version: one version per request, picked by the
model's traffic split (store/traffic.py), or None when it has none (the newest deployed version answers, as
before splits existed).

Why a smooth weighted round robin rather than KServe's weighted random choice: each gateway then sends every
version its share exactly over every 100 requests (90/10 is nine requests to one version, then one to the other,
interleaved), where random choice only approaches the share, with ~0.7 points of spread over 2,000 requests at
10%. Several gateways each keep their own rounds, so the total is exact per gateway and the sum of exact parts.
A round's position outlives cache clears (any tenant's key or deployment change clears every cache): restarting
it at each clear would favour the largest share, and a version at 10% would see nothing while changes come more
often than every ten requests. It restarts only when the model's ready weights change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool

from luminal.gateway.errors import ApiError
from luminal.store import traffic as traffic_store
from luminal.store.database import Database
from luminal.store.errors import NotFound
from luminal.store.tables import Tenant

if TYPE_CHECKING:
    from luminal.gateway.platform import Platform

# The OpenAI routes' answers name the version that answered in this header (OIP answers carry model_version).
MODEL_VERSION_HEADER = "x-luminal-model-version"
Weights = tuple[tuple[int, int], ...]  # (version, percent) of the ready versions, by version


@dataclass(frozen=True)
class ReadySplit:
    """A model's split as routing sees it: None when it has none, else the weights of its ready versions (empty
    when none of them is ready)."""

    weights: Weights | None


class SmoothRoundRobin:
    """Nginx's smooth weighted round robin: each pick adds every weight to its version's credit and takes the
    version with the most, which then pays the total. Over any `sum(weights)` picks each version gets exactly its
    weight, spread out rather than in runs."""

    def __init__(self, weights: Weights):
        self.weights = weights
        self.total = sum(w for _, w in weights)
        self.credit = dict.fromkeys((v for v, _ in weights), 0)

    def pick(self) -> int:
        for version, weight in self.weights:
            self.credit[version] += weight
        chosen = max(self.weights, key=lambda vw: self.credit[vw[0]])[0]  # ties: the first, the lowest version
        self.credit[chosen] -= self.total
        return chosen


class VersionChooser:
    """The rounds of every model with a split, per (tenant id, model name). Used on the event loop only."""

    def __init__(self):
        self._rounds: dict[tuple[int, str], SmoothRoundRobin] = {}

    def forget(self, key: tuple[int, str]) -> None:
        """The model has no split (any more): its round is dropped, so deleted splits do not pile up."""
        self._rounds.pop(key, None)

    def choose(self, key: tuple[int, str], weights: Weights) -> int:
        rounds = self._rounds.get(key)
        if rounds is None or rounds.weights != weights:
            rounds = self._rounds[key] = SmoothRoundRobin(weights)
        return rounds.pick()


async def routed_version(platform: Platform, tenant: Tenant, name: str) -> str | None:
    """The version that answers an unversioned request for `name` (as the path's text), or None when the model
    has no split (or does not exist: the deployment lookup then answers as before). 503 when it has a split but
    none of its versions is ready."""
    key = (tenant.id, name)
    split = platform.traffic_splits.get(key)
    if split is None:
        generation = platform.traffic_splits.generation()
        split = await run_in_threadpool(read_ready_split, platform.db, tenant, name)
        platform.traffic_splits.put(key, split, generation)
        if split.weights is None:
            platform.version_chooser.forget(key)
    if split.weights is None:
        return None
    if not split.weights:
        raise ApiError(503, no_ready_version(name))
    return str(platform.version_chooser.choose(key, split.weights))


def no_ready_version(name: str) -> str:
    return f"no version in model {name!r}'s traffic split is ready; set a new split or clear it"


def read_ready_split(db: Database, tenant: Tenant, name: str) -> ReadySplit:
    """The model's split over its ready versions, read now (blocking); no split for a model that does not exist."""
    try:
        with db.session() as session:
            ready = traffic_store.ready_split(session, tenant, name)
    except NotFound:  # no such model: the deployment lookup that follows says so, in its own words
        ready = None
    return ReadySplit(None if ready is None else tuple(sorted(ready.items())))
