"""What batching reads of the scheduler's requests and queue, as protocols, so the arrow points one way.

The scheduler's worker drives batching (`scheduler → batching`): it hands a `BatchFormer` its request queue and
gets deliveries back, and it assembles and splits its `InferenceRequest`s here. Batching names only the few
attributes it reads; the scheduler's `InferenceRequest`, `Delivery` and `RequestQueue` have them, and batching
never imports the scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np


class BatchRequest(Protocol):
    """One request's identity and named input arrays (their leading dim is the batch axis when batchable)."""

    id: str
    inputs: Mapping[str, np.ndarray]


class Delivery(Protocol):
    """A request taken from a queue by one consumer."""

    request: BatchRequest


class DeliverySource(Protocol):
    """The worker side of a request queue that a former takes batches from."""

    def take(self, deployment_id: int, consumer: str, max_items: int, wait_s: float) -> list[Delivery]:
        """Up to `max_items` deliveries, waiting up to `wait_s` for the first."""
        ...
