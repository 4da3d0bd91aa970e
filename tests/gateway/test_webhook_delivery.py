"""Webhook delivery: the target is checked again when sending, on the addresses actually connected to (a name
that resolved to a public address at submission and to loopback now is refused, unsent); the request goes to the
checked address with the name kept in Host and TLS's SNI; redirects are never followed, wherever they point; and
every attempt is signed both ways, the Standard Webhooks way checked by that standard's own library.

Most tests replace the network with an httpx MockTransport and DNS with a fake, and `no_network` shows no socket
connected; the last ones use a real receiver on loopback with private targets allowed explicitly."""

from __future__ import annotations

import asyncio
import ipaddress
import json

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from luminal.gateway import webhook_targets
from luminal.gateway.webhook_signatures import SIGNATURE_HEADER, standard_webhooks_secret, verify_signature
from luminal.gateway.webhook_targets import RefusedTarget, check_target
from luminal.gateway.webhooks import deliver
from tests.gateway.webhook_receiver import Receiver

SECRET = "s" * 32
PUBLIC_V4, OTHER_PUBLIC_V4 = "93.184.215.14", "93.184.215.15"


class FakeDns:
    """Answers each name with the next of its scripted answers (the last one repeats): DNS that changes its mind."""

    def __init__(self, answers: dict[str, list[list[str]]]):
        self.answers = answers
        self.asked: list[str] = []

    def __call__(self, host: str, port: int):
        self.asked.append(host)
        if host not in self.answers:
            raise RefusedTarget(f"the webhook host {host!r} does not resolve")
        script = self.answers[host]
        addresses = script.pop(0) if len(script) > 1 else script[0]
        return [ipaddress.ip_address(a) for a in addresses]


@pytest.fixture
def dns(monkeypatch) -> FakeDns:
    fake = FakeDns({"hooks.example": [[PUBLIC_V4, OTHER_PUBLIC_V4]], "rebind.example": [[PUBLIC_V4], ["127.0.0.1"]]})
    monkeypatch.setattr(webhook_targets, "resolve", fake)
    return fake


class Recorder:
    """A MockTransport handler: records each request and answers with the next scripted response (else 204)."""

    def __init__(self, *responses: httpx.Response | Exception):
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.responses.pop(0) if self.responses else httpx.Response(204)
        if isinstance(answer, Exception):
            raise answer
        return answer


def send(url: str, recorder: Recorder | None = None, **options):
    transport = None if recorder is None else httpx.MockTransport(recorder)
    return asyncio.run(deliver(url, b'{"status": "succeeded"}', SECRET, "msg_1", transport=transport, **options))


@pytest.mark.parametrize(
    "url,reason",
    [
        ("http://127.0.0.1:8000/hook", "a loopback address"),
        ("http://2130706433/hook", "a loopback address"),
        ("http://[::ffff:169.254.169.254]/", "a link-local address"),
        ("http://localhost/", "a loopback name"),
        ("http://rebind.example/", "resolves to 127.0.0.1"),  # public when first asked, loopback now (rebinding)
    ],
)
def test_a_refused_target_is_never_contacted_at_delivery(url, reason, dns, no_network):
    if url == "http://rebind.example/":
        assert [str(a) for a in check_target(url).addresses] == [PUBLIC_V4]  # as at submission
    recorder = Recorder()
    delivery = send(url, recorder)
    assert not delivery.delivered and delivery.attempts == 0 and reason in delivery.error
    assert recorder.requests == [] and no_network.connects == [] and no_network.lookups == []


def test_the_request_goes_to_the_checked_address_with_the_name_in_host_and_sni(dns, no_network):
    recorder = Recorder()
    delivery = send("https://hooks.example:8443/in?src=luminal", recorder)
    assert delivery.delivered and delivery.attempts == 1
    (request,) = recorder.requests
    assert str(request.url) == f"https://{PUBLIC_V4}:8443/in?src=luminal"
    assert request.headers["host"] == "hooks.example:8443"
    assert request.extensions["sni_hostname"] == "hooks.example"
    assert dns.asked == ["hooks.example"]  # resolved once, for every attempt
    assert no_network.connects == []


def test_a_retry_moves_to_the_next_checked_address(dns, no_network):
    recorder = Recorder(httpx.ConnectError("connection refused"))
    delivery = send("http://hooks.example/in", recorder, backoff_s=0)
    assert delivery.delivered and delivery.attempts == 2
    assert [r.url.host for r in recorder.requests] == [PUBLIC_V4, OTHER_PUBLIC_V4]
    assert {r.headers["host"] for r in recorder.requests} == {"hooks.example"} and dns.asked == ["hooks.example"]


@pytest.mark.parametrize(
    "location",
    ["http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:6379/", "http://[::1]/", "https://hooks.example/b"],
)
@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_redirects_are_never_followed(status, location, dns, no_network):
    recorder = Recorder(httpx.Response(status, headers={"Location": location}))
    delivery = send("http://hooks.example/in", recorder)
    assert not delivery.delivered and delivery.attempts == 1 and len(recorder.requests) == 1
    assert f"HTTP {status}" in delivery.error and location in delivery.error and "follow no redirects" in delivery.error
    assert dns.asked == ["hooks.example"] and no_network.connects == []


def test_every_attempt_is_signed_both_ways_under_one_message_id(dns, no_network):
    recorder = Recorder(httpx.Response(503), httpx.Response(500))
    delivery = send("http://hooks.example/in", recorder, backoff_s=0)
    assert delivery.delivered and delivery.attempts == 3
    standard = Webhook(standard_webhooks_secret(SECRET))
    for request in recorder.requests:
        body, headers = request.content, dict(request.headers)
        assert standard.verify(body, headers) == json.loads(body)
        assert verify_signature(SECRET, headers[SIGNATURE_HEADER.lower()], body)
        assert headers["webhook-id"] == "msg_1" and headers["webhook-timestamp"].isdigit()
        assert headers[SIGNATURE_HEADER.lower()].startswith(f"t={headers['webhook-timestamp']},")


def test_with_private_targets_allowed_a_loopback_receiver_gets_it_and_its_redirect_is_not_followed(no_network):
    elsewhere = Receiver()
    redirecting = Receiver(statuses=[302], headers={"Location": elsewhere.url})
    try:
        refused = send(redirecting.url)
        assert refused.attempts == 0 and "a loopback address" in refused.error  # not without the setting
        delivery = send(redirecting.url, allow_private=True)
        assert not delivery.delivered and "follow no redirects" in delivery.error
        assert len(redirecting.deliveries) == 1 and elsewhere.deliveries == []
        assert redirecting.address in no_network.connects  # the guard sees real connects...
        assert no_network.connected_beyond(redirecting.address) == []  # ...and there was no other
        assert send(elsewhere.url, allow_private=True).delivered and len(elsewhere.deliveries) == 1
    finally:
        redirecting.close()
        elsewhere.close()
