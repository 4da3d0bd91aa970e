"""Language-model workers as threads of the gateway beside another backend's workers: until worker processes take
sequences across machines (a Redis sequence transport), a platform whose workers run outside the gateway
(processes, pods, instances) serves its language models from threads of the gateway, through the in-memory
sequence transport, as the embedded default does; every other deployment's workers start on that backend."""

from __future__ import annotations

from luminal.provisioner.backends import ThreadWorkers, WorkerBackend, WorkerHandle
from luminal.scheduler.worker_spec import WorkerSpec


class GatewayLanguageModels:
    def __init__(self, others: WorkerBackend, threads: ThreadWorkers):
        self.others, self.threads = others, threads
        # The deployments' GPU types are the other backend's to grant; a language model's thread bills that type,
        # as the gateway's engines did before they moved to workers.
        self.offer = threads.offer = others.offer

    def start(self, spec: WorkerSpec) -> WorkerHandle:
        return (self.threads if spec.is_language_model else self.others).start(spec)

    def prune(self, keep: set[int]) -> None:
        getattr(self.others, "prune", lambda keep: None)(keep)

    def close(self) -> None:
        getattr(self.others, "close", lambda: None)()
