"""Language models served by workers the provisioner runs on Kubernetes (kmock's emulator) and EC2 (moto), each
backend's workers made real processes by a node stand-in (a kubelet, a VM) that runs exactly what the backend asked
for: the pod's command with its Secret's environment, the instance's systemd unit with the environment its user data
writes. Traffic scales the deployment up from zero; the `openai` client streams greedy completions equal to
transformers' generate(), billed once each; a worker killed mid-stream is restarted by its node (in place, under its
old name) while its streams end with an error naming its death, not a hang; pods deleted mid-stream are replaced
under new names, the one deleted gracefully draining its streams, the one killed ending those it had begun with the
error; idle, the deployment goes to zero, and deleted, its workers are stopped."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest

from luminal.gateway.openai_generation import WORKER_SILENT_S
from luminal.provisioner.kubernetes_manifest import deployment_name
from tests.gateway.conftest import BOOTSTRAP_KEY, _fresh_postgres_schema
from tests.gateway.test_llm_routing_api import wait_for as wait_every
from tests.gateway.test_llm_worker_processes import WORDS, billed_by_worker, billed_records, takers, worker_of
from tests.provisioner.container_standin import require_mount_namespaces
from tests.provisioner.kubelet_standin import KubeletStandIn
from tests.provisioner.kubernetes_emulator import running_emulator
from tests.provisioner.llm_remote_world import (
    MODEL,
    VENV,
    World,
    image_environment,
    moto_server,
    platform_settings,
    serving,
    worker_environment,
)
from tests.provisioner.vm_standin import VmStandIn
from tests.scheduler.queue_fixtures import fresh_namespace

pytest.importorskip("kubernetes")
pytest.importorskip("moto")
K8S_NAMESPACE, SECRET = "llm", "luminal-worker-env"
WHEEL = "https://example.com/luminal_cloud-0.1.0-py3-none-any.whl"  # the VM stand-in has it installed
LONG = 300  # tokens of the kill test's streams: still running when the kill lands
# Each look of a wait is a gateway request or a read of the backend's API: at wait_for's 20 a second, the waits
# for workers to load, idle and stop (a minute a backend) cost the suite's 2 cores more than the answers' checks.
LOOK_EVERY_S = 0.25
# A restarted worker imports, fetches and loads its program again: about 10 s on a quiet 2-core machine, several
# times that beside a loaded one (one run under load 6-9 failed its EC2 kill case with 90 s). A wait ends when
# its condition holds, so a long bound costs nothing where things work.
RESTART_S = 240


def wait_for(condition, what: str, timeout: float, state=None):
    """`state()`, if given, is added to the error of a wait that timed out: what the node and registry held."""
    try:
        return wait_every(condition, what, timeout, every_s=LOOK_EVERY_S)
    except AssertionError as timed_out:
        if state is None:
            raise
        raise AssertionError(f"{timed_out}\n{state()}") from None


@pytest.fixture(scope="module", params=["kubernetes", "ec2"])
def world(request, tmp_path_factory, postgres_database):
    require_mount_namespaces()
    backend, tmp = request.param, tmp_path_factory.mktemp(f"llm-{request.param}")
    _fresh_postgres_schema(postgres_database)  # the other backend's world used it: its models and usage go
    with fresh_namespace() as namespace, moto_server() as aws, pytest.MonkeyPatch.context() as env:
        for name, value in aws.env().items():
            env.setenv(name, value)
        nodes = kubernetes_node if backend == "kubernetes" else ec2_node
        with nodes(tmp, platform_settings(tmp, postgres_database, namespace), aws, env) as (settings, node):
            try:
                with serving(tmp, settings) as running:
                    running.node = node
                    yield running
            finally:
                node.close()
            assert node.all_stopped()


@contextmanager
def kubernetes_node(tmp, settings, aws, env):
    """The emulator named by a kubeconfig, the operator's worker Secret in it, and a kubelet for its pods."""
    from kubernetes import client

    with running_emulator() as emulator:
        env.setenv("KUBECONFIG", str(emulator.kubeconfig(tmp / "kubeconfig")))
        env.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        settings = settings.model_copy(update={"worker_backend": "kubernetes", "kubernetes_namespace": K8S_NAMESPACE,
                                               "kubernetes_worker_secret": SECRET})  # fmt: skip
        data = {k: base64.b64encode(v.encode()).decode() for k, v in worker_environment(settings, aws).items()}
        secret = {"apiVersion": "v1", "kind": "Secret", "data": data,
                  "metadata": {"name": SECRET, "namespace": K8S_NAMESPACE}}  # fmt: skip
        client.CoreV1Api(emulator.client()).create_namespaced_secret(K8S_NAMESPACE, secret)
        yield settings, KubeletStandIn(emulator.client(), K8S_NAMESPACE, image_environment(), tmp / "node").start()


@contextmanager
def ec2_node(tmp, settings, aws, env):
    """moto's EC2 with the operator's worker secret in its Secrets Manager, and VMs for its instances."""
    ec2 = aws.client("ec2")
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2_fields = {"ec2_ami_id": ami, "ec2_worker_secret": "luminal/worker-env", "ec2_worker_wheel_url": WHEEL}
    settings = settings.model_copy(update={"worker_backend": "ec2", **ec2_fields})
    secret = json.dumps(worker_environment(settings, aws))
    aws.client("secretsmanager").create_secret(Name=settings.ec2_worker_secret, SecretString=secret)
    yield settings, VmStandIn(ec2, {"PATH": os.environ["PATH"], **aws.env()}, VENV, tmp / "vms").start()


def remote_replicas(world: World) -> int:
    """The workers the backend holds for the deployment: the worker Deployment's replicas, or live instances."""
    backend, d = world.platform.provisioner.backend, world.deployment["id"]
    if world.settings.worker_backend == "kubernetes":
        replicas = backend.deployments.replicas(d)
        return 0 if replicas is None else replicas.wanted
    return backend.replicas(d)


def client(world: World) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{world.url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0, timeout=120)


async def streamed(api, prompt: str, n: int, seen: list[str] | None = None) -> tuple[str, str]:
    """(request id, text) of one greedy streamed completion; its id put in `seen` with its first chunk."""
    stream = await api.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0, stream=True,
                                          extra_body={"ignore_eos": True})  # fmt: skip
    parts, request_id = [], None
    async for chunk in stream:
        if request_id is None:
            request_id = chunk.id.removeprefix("cmpl-")
            if seen is not None:
                seen.append(request_id)
        parts.append(chunk.choices[0].text)
    return request_id, "".join(parts)


def served(world: World, jobs: list[tuple[str, int]]) -> list[tuple[str, str]]:
    async def together():
        api = client(world)
        try:
            return await asyncio.wait_for(asyncio.gather(*(streamed(api, p, n) for p, n in jobs)), 180)
        finally:
            await api.close()

    return asyncio.run(together())


class Watch:
    """What the backend holds and the node runs, sampled while a test's streams run (a scale-down follows their end):
    the most replicas asked for, and each worker process seen with its command line and environment."""

    def __init__(self, world: World):
        self.world, self.most_replicas, self.seen = world, 0, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _sample(self) -> None:
        # Each sample is a read the backend's API answers; the workers and their replicas last the streams' seconds.
        while not self._stop.wait(0.25):
            self.most_replicas = max(self.most_replicas, remote_replicas(self.world))
            for worker_id, container in self.world.node.workers().items():
                if worker_id not in self.seen:
                    try:
                        proc = Path(f"/proc/{container.pid}")
                        argv = proc.joinpath("cmdline").read_bytes().decode().split("\0")[:-1]
                        environ = proc.joinpath("environ").read_bytes().decode().split("\0")
                    except OSError:  # it ended between the two reads
                        continue
                    if argv[:1] in (["unshare"], ["sh"]):  # still mounting its volumes, before it becomes the command
                        continue
                    self.seen[worker_id] = (argv, dict(line.split("=", 1) for line in environ if line))


def test_traffic_scales_workers_up_from_zero_and_they_stream_what_generate_gives(world):
    assert remote_replicas(world) == 0 and not world.node.workers()  # min_replicas 0, no traffic yet
    jobs = [(" ".join(WORDS[k : k + 1 + k % 4]), 6 + k) for k in range(6)]
    with Watch(world) as watch:
        answers = served(world, jobs)  # 6 waiting sequences, 2 per replica: max_replicas 2 are asked for
    assert [text for _, text in answers] == world.expected(jobs)

    # Two replicas are asked for; on a loaded machine the first can serve all six before the second's process runs.
    assert watch.most_replicas == 2 and 1 <= len(watch.seen) <= 2
    d = world.deployment["id"]
    for worker_id, (argv, environ) in watch.seen.items():  # each ran the worker command the backend gave
        assert argv == ["python", "-m", "luminal.scheduler.worker_process", str(d), worker_id, "cpu"]
        assert environ["LUMINAL_DATABASE_URL"] == world.settings.resolved_database_url  # from the secret
        assert environ["LUMINAL_DATA_DIR"] == "/var/lib/luminal" and "PYTEST_CURRENT_TEST" not in environ

    assert world.platform.usage_drainer.flush(timeout=60), "the usage records were not drained"
    billed = billed_by_worker(world.settings)
    assert sorted(rid for _, rid in billed) == sorted(rid for rid, _ in answers)  # each stream billed once
    assert {worker for worker, _ in billed} <= set(watch.seen)  # by the node's processes
    tokens = {rid: n for rid, _, _, n in billed_records(world.settings)}
    assert [tokens[rid] for rid, _ in answers] == [n for _, n in jobs]


def scale(world: World, **bounds: int) -> None:
    with world.http() as http:
        r = http.patch(f"/v1/deployments/{world.deployment['id']}", json=bounds)
        assert r.status_code == 200, r.text


def held_workers(world: World) -> set[str]:
    """The workers the backend holds for the deployment: its Deployment's pods (the kubelet runs no other), or its
    live instances' (a VM whose instance was terminated while it booted may still start its worker for a moment)."""
    if world.settings.worker_backend == "kubernetes":
        return set(world.node.workers())
    return set(world.platform.provisioner.backend.instances(world.deployment["id"]).values())


def two_ready_and_running(world: World) -> bool:
    ready = {w["worker_id"] for w in world.workers() if w["ready_at"]}
    return len(ready) == 2 and ready == set(world.node.workers()) == held_workers(world)


def test_a_worker_killed_mid_stream_is_restarted_and_its_streams_end_with_an_error(world):
    scale(world, min_replicas=2)  # two warm workers throughout: no scale-down takes the victim's pod away
    # Both ready workers running where the node runs them, on instances the backend holds: a worker an earlier
    # scale-down was already stopping (or whose instance it terminated as it booted) still counted as ready, took a
    # stream and was not restarted after the test killed it.
    wait_for(lambda: two_ready_and_running(world), "two ready workers, both running on the node", 90)
    jobs = [(" ".join(WORDS[k % 7 : k % 7 + 1 + k % 3]), LONG) for k in range(8)]
    seen: list[list[str]] = [[] for _ in jobs]

    async def killed_during_streams():
        api = client(world)
        try:
            tasks = [asyncio.create_task(streamed(api, p, n, ids)) for (p, n), ids in zip(jobs, seen)]
            deadline = time.monotonic() + 120
            victim = None
            while victim is None:  # killed once one of its streams has tokens: that one must end with the error
                assert time.monotonic() < deadline, "no stream got a token"
                await asyncio.sleep(0.01)
                victim = next((worker_of(world.settings, ids[0]) for ids in seen if ids), None)
            container = world.node.workers()[victim]
            killed_pid = container.pid
            container.kill()
            killed_at = time.monotonic()
            done, _ = await asyncio.wait(tasks, timeout=60)
            assert len(done) == len(tasks), "a stream of the killed worker hung instead of ending"
            ended = time.monotonic() - killed_at
            return victim, killed_pid, [t.exception() or t.result() for t in tasks], ended
        finally:
            await api.close()

    victim, killed_pid, outcomes, ended_s = asyncio.run(killed_during_streams())
    expected = world.expected(jobs)
    failed = [o for o in outcomes if isinstance(o, Exception)]
    for outcome, want in zip(outcomes, expected, strict=True):
        if isinstance(outcome, Exception):
            assert isinstance(outcome, openai.APIError) and f"worker {victim} died" in str(outcome.body["message"])
        else:
            assert outcome[1] == want
    assert failed, "the killed worker's stream that had tokens did not end with the error"

    # Its node restarts it (a container in place: the same worker id; a service on the same instance), and it serves.
    def state() -> str:
        return f"{world.node.report(victim)}\nregistered: {world.workers()}"

    def restarted_pid() -> int | None:
        container = world.node.workers().get(victim)
        return container.pid if container is not None and container.pid != killed_pid else None

    restarted = wait_for(restarted_pid, "the killed worker's restart", RESTART_S, state)
    wait_for(lambda: any(w["worker_id"] == victim and w["pid"] == restarted and w["ready_at"] for w in world.workers()),
             "the restarted worker to be ready", RESTART_S, state)  # fmt: skip
    later = served(world, [(p, 5) for p, _ in jobs[:4]])
    assert [text for _, text in later] == world.expected([(p, 5) for p, _ in jobs[:4]])

    assert world.platform.usage_drainer.flush(timeout=60), "the usage records were not drained"
    billed = [rid for _, rid in billed_by_worker(world.settings)]
    assert len(billed) == len(set(billed))  # nothing billed twice
    records = {rid: (worker, n) for rid, worker, _, n in billed_records(world.settings)}
    for outcome, ids in zip(outcomes, seen, strict=True):
        if isinstance(outcome, Exception):  # what the dead worker delivered, billed under its id by the relay
            delivered = int(re.search(r"after (\d+) tokens", outcome.body["message"]).group(1))
            assert records[ids[0]] == (victim, delivered)
    print(f"\nworker killed mid-stream: streams={len(jobs)} ended_with_error={len(failed)} "
          f"all_ended_after={ended_s:.2f}s")  # fmt: skip


def replacements(world: World, old: set[str]) -> set[str] | None:
    """The node's two running workers once neither is one of `old` and both are ready; else None."""
    running = set(world.node.workers())
    ready = {w["worker_id"] for w in world.workers() if w["ready_at"]}
    return running if len(running) == 2 and not running & old and running <= ready else None


async def ended(stream) -> tuple[tuple[str, str] | Exception, float]:
    """The stream's (request id, text) or the error it ended with, and when it ended."""
    try:
        outcome = await stream
    except Exception as error:
        outcome = error
    return outcome, time.monotonic()


def test_deleted_pods_are_replaced_under_new_names_and_their_streams_end_or_fail_in_bounded_time(world):
    """A Deployment replaces a deleted or evicted pod with a new pod, a new POD_NAME: a new worker id, where a
    restart in place keeps the old one. Of two pods deleted while their streams run, the one deleted gracefully
    (`kubectl delete pod`, an eviction) drains: its streams complete; the one deleted by force (or lost with its
    node) is killed: its streams that had tokens end with an error naming its death once the relays find its
    heartbeat stopped, the others are served again. The replacements serve new streams; nothing is billed twice,
    and each stream's tokens under the worker that produced them."""
    if world.settings.worker_backend != "kubernetes":
        pytest.skip("a pod replaced under a new name is Kubernetes'")
    scale(world, min_replicas=2)
    wait_for(lambda: two_ready_and_running(world), "two ready workers, both running on the node", 90)
    old = set(world.node.workers())
    jobs = [(" ".join(WORDS[k % 7 : k % 7 + 1 + k % 3]), LONG) for k in range(8)]  # the kill test's: generated once
    seen: list[list[str]] = [[] for _ in jobs]

    async def deleted_during_streams():
        api = client(world)
        try:
            tasks = [asyncio.create_task(ended(streamed(api, p, n, ids))) for (p, n), ids in zip(jobs, seen)]
            deadline, holder = time.monotonic() + 120, {}
            while set(holder.values()) != old:  # both pods emit tokens: the streams of each are cut by its deletion
                assert time.monotonic() < deadline, f"only {set(holder.values())} of {old} sent tokens"
                await asyncio.sleep(0.02)
                for ids in seen:  # each stream's worker read once, when its first token came
                    if ids and ids[0] not in holder:
                        holder[ids[0]] = worker_of(world.settings, ids[0])
            # The pod killed is one with a stream still running (on a loaded machine one pod can finish all of its
            # streams while the other sends its first token); the other is drained.
            cut = sorted({holder[ids[0]] for ids, task in zip(seen, tasks, strict=True) if ids and not task.done()})
            assert cut, "every stream ended before the pods were deleted"
            killed, drained = cut[0], (old - {cut[0]}).pop()
            draining = world.node.delete_pod(drained)  # SIGTERM, then its terminationGracePeriodSeconds
            world.node.delete_pod(killed, grace_s=0)  # forced: SIGKILL at once
            deleted_at = time.monotonic()
            done, _ = await asyncio.wait(tasks, timeout=RESTART_S)  # those served again wait for a replacement
            assert len(done) == len(tasks), "a stream of a deleted pod hung instead of ending"
            return drained, killed, draining, deleted_at, [task.result() for task in tasks]
        finally:
            await api.close()

    drained, killed, draining, deleted_at, outcomes = asyncio.run(deleted_during_streams())
    failed = []
    for (outcome, ended_at), want, ids in zip(outcomes, world.expected(jobs), seen, strict=True):
        if isinstance(outcome, Exception):
            assert isinstance(outcome, openai.APIError) and f"worker {killed} died" in outcome.body["message"]
            # The relay asks whether the worker lives after each silence (WATCH_S) and finds it dead once its
            # heartbeat is WORKER_SILENT_S old; the rest is slack for a loaded machine.
            assert ended_at - deleted_at < WORKER_SILENT_S + 15, f"ended {ended_at - deleted_at:.1f} s after"
            failed.append((ids[0], int(re.search(r"after (\d+) tokens", outcome.body["message"]).group(1))))
        else:
            assert outcome[1] == want
    assert failed, "no stream of the killed pod ended with the error"
    drained_ids = [ids[0] for ids in seen if ids and worker_of(world.settings, ids[0]) == drained]
    assert drained_ids and not {rid for rid, _ in failed} & set(drained_ids)  # the drained pod completed its own

    fresh = wait_for(lambda: replacements(world, old), "two replacement pods, under new names, ready", RESTART_S)
    later = served(world, [(p, 5) for p, _ in jobs[:4]])
    assert [text for _, text in later] == world.expected([(p, 5) for p, _ in jobs[:4]])
    assert {worker_of(world.settings, rid) for rid, _ in later} <= fresh

    assert world.platform.usage_drainer.flush(timeout=60), "the usage records were not drained"
    billed = [rid for _, rid in billed_by_worker(world.settings)]
    assert len(billed) == len(set(billed))  # nothing billed twice
    records = {rid: (worker, n) for rid, worker, _, n in billed_records(world.settings)}
    for rid, delivered in failed:  # billed by the relay, under the dead worker's id
        assert records[rid] == (killed, delivered)
    completed = [(o[0], LONG) for o, _ in outcomes if not isinstance(o, Exception)] + [(rid, 5) for rid, _ in later]
    for rid, n in completed:  # by the worker that took it last: the one that produced its tokens
        assert records[rid] == (takers(world.settings, rid)[-1], n)

    # The registry, which /workers shows: the drained worker deregistered as it stopped; the killed one, which
    # never did, is forgotten by the backend once its heartbeat is older than the longest batch allows.
    wait_for(lambda: not draining.running(), "the drained pod's worker to exit", 60)
    assert drained not in {w["worker_id"] for w in world.workers()}
    forgotten_s = world.settings.execution_timeout_s + 30 + 30
    wait_for(lambda: {w["worker_id"] for w in world.workers()} == fresh, "the killed worker to be forgotten",
             forgotten_s)  # fmt: skip
    print(f"\npods deleted mid-stream: streams={len(jobs)} ended_with_error={len(failed)} "
          f"drained_by_{drained}={len(drained_ids)}")  # fmt: skip


def test_idle_workers_scale_to_zero_and_a_deleted_deployments_are_stopped(world):
    d = world.deployment["id"]
    scale(world, min_replicas=0)
    wait_for(lambda: remote_replicas(world) == 0, "scale to zero after idling", timeout=120)
    wait_for(lambda: not world.node.workers(), "the idle workers' processes to stop", 90)
    wait_for(lambda: not world.workers(), "the stopped workers to deregister", 30,
             lambda: "\n".join(world.node.report(w["worker_id"]) for w in world.workers()))  # fmt: skip

    served(world, [("hello world", 3)])  # traffic again: a worker from zero
    assert remote_replicas(world) >= 1 and world.node.workers()
    with world.http() as http:
        assert http.delete(f"/v1/deployments/{d}").status_code == 204
    wait_for(lambda: remote_replicas(world) == 0, "the deleted deployment's workers to be released", 60)
    wait_for(lambda: not world.node.workers(), "the deleted deployment's worker processes to stop", 90)
    if world.settings.worker_backend == "kubernetes":
        assert deployment_name(d) not in {p for p in world.node.pods}  # its pods went with the Deployment
