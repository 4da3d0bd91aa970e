"""Webhook targets inside the platform's network are refused, in every spelling, before anything is sent: loopback,
private, link-local (cloud metadata), multicast, reserved and unspecified addresses in IPv4 and IPv6, IPv4
carried inside IPv6, the decimal, hex, octal and short IPv4 forms, and names that resolve to any of them. Each
refusal is checked under `no_network`: no connect and no DNS lookup was made for the target. Names other than
localhost resolve through a fake DNS (`webhook_targets.resolve` replaced), so no test asks a real resolver."""

from __future__ import annotations

import ipaddress

import pytest

from luminal.gateway import webhook_targets
from luminal.gateway.webhook_targets import RefusedTarget, check_target, ipv4_spelling

# (URL, the words the refusal must use)
REFUSED_ADDRESSES = [
    ("http://127.0.0.1/hook", "is 127.0.0.1, a loopback address"),
    ("http://127.8.9.10:8080/", "a loopback address"),
    ("http://2130706433/", "is 127.0.0.1, a loopback address"),  # decimal
    ("http://0x7f000001/", "is 127.0.0.1, a loopback address"),  # hexadecimal
    ("http://0177.1/", "is 127.0.0.1, a loopback address"),  # octal
    ("http://0177.0.0.1/", "Invalid IPv4 address"),  # octal too, which the HTTP client itself refuses to parse
    ("http://127.1/", "is 127.0.0.1, a loopback address"),  # short form
    ("http://0x7f.1/", "is 127.0.0.1, a loopback address"),
    ("http://[::1]:8080/", "a loopback address"),
    ("http://[::ffff:127.0.0.1]/", "a loopback address (127.0.0.1 inside IPv6)"),  # IPv4-mapped
    ("http://[::ffff:a9fe:a9fe]/", "a link-local address"),  # the metadata service, mapped
    ("http://[64:ff9b::a00:1]/", "a private address (10.0.0.1 inside IPv6)"),  # NAT64
    ("http://[2002:c0a8:101::1]/", "a private address (192.168.1.1 inside IPv6)"),  # 6to4
    ("http://10.0.0.1/", "a private address"),
    ("http://172.16.5.4/", "a private address"),
    ("http://192.168.1.1/", "a private address"),
    ("http://[fd00::1]/", "a private address"),
    ("http://169.254.169.254/latest/meta-data/", "a link-local address (where cloud metadata services answer)"),
    ("http://[fe80::1]/", "a link-local address"),
    ("http://224.0.0.1/", "a multicast address"),
    ("http://[ff02::1]/", "a multicast address"),
    ("http://240.0.0.1/", "a reserved address"),
    ("http://0.0.0.0:8000/", "the unspecified address"),
    ("http://0/", "the unspecified address"),
    ("http://[::]/", "the unspecified address"),
    ("http://100.64.0.1/", "not publicly routable"),  # carrier-grade NAT
    ("https://localhost:8443/", "'localhost' is a loopback name"),
    ("http://LOCALHOST./", "is a loopback name"),
    ("http://api.localhost/", "is a loopback name"),
]

PUBLIC_V4, PUBLIC_V6 = "93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"
FAKE_DNS = {
    "rebound.example": ["127.0.0.1"],
    "internal.example": ["10.0.0.7"],
    "metadata.example": ["169.254.169.254"],
    "v6loop.example": ["::1"],
    "mapped.example": ["::ffff:192.168.0.9"],
    "mixed.example": [PUBLIC_V4, "192.168.0.3"],  # one bad address is enough: which one is used is not ours
    "public.example": [PUBLIC_V4, PUBLIC_V6],
    "localhost": ["127.0.0.1"],  # only reached with private targets allowed
}
REFUSED_NAMES = [
    ("http://rebound.example/", "'rebound.example' resolves to 127.0.0.1, a loopback address"),
    ("http://internal.example/", "resolves to 10.0.0.7, a private address"),
    ("http://metadata.example/", "resolves to 169.254.169.254, a link-local address"),
    ("http://v6loop.example/", "resolves to ::1, a loopback address"),
    ("http://mapped.example/", "a private address (192.168.0.9 inside IPv6)"),
    ("http://mixed.example/", "resolves to 192.168.0.3, a private address"),
    ("http://nowhere.example/", "does not resolve"),
]


@pytest.fixture
def fake_dns(monkeypatch) -> dict[str, list[str]]:
    """`webhook_targets.resolve` answers from FAKE_DNS (copied: a test may change it), never from a resolver."""
    table = {name: list(addresses) for name, addresses in FAKE_DNS.items()}

    def resolve(host: str, port: int):
        if host not in table:
            raise RefusedTarget(f"the webhook host {host!r} does not resolve: not in the fake DNS")
        return [ipaddress.ip_address(a) for a in table[host]]

    monkeypatch.setattr(webhook_targets, "resolve", resolve)
    return table


@pytest.mark.parametrize("url,reason", REFUSED_ADDRESSES + REFUSED_NAMES)
def test_internal_targets_are_refused_without_contacting_them(url, reason, fake_dns, no_network):
    with pytest.raises(RefusedTarget) as refused:
        check_target(url)
    assert reason in str(refused.value)
    if "malformed" not in str(refused.value) and "does not resolve" not in reason:
        assert "LUMINAL_WEBHOOK_ALLOW_PRIVATE" in str(refused.value)  # says how to allow it on purpose
    assert no_network.connects == [] and no_network.lookups == []


def test_public_targets_keep_every_address_and_the_name_for_host_and_tls(fake_dns, no_network):
    target = check_target("https://public.example:8443/hook?x=1")
    assert [str(a) for a in target.addresses] == [PUBLIC_V4, PUBLIC_V6]
    assert str(target.url_at(target.addresses[0])) == f"https://{PUBLIC_V4}:8443/hook?x=1"
    assert str(target.url_at(target.addresses[1])) == f"https://[{PUBLIC_V6}]:8443/hook?x=1"
    assert (target.host_header, target.server_name) == ("public.example:8443", "public.example")
    assert [str(a) for a in check_target("http://8.8.8.8/").addresses] == ["8.8.8.8"]
    assert [str(a) for a in check_target("http://[::ffff:8.8.8.8]/").addresses] == ["::ffff:808:808"]
    assert [str(a) for a in check_target("http://[64:ff9b::808:808]/").addresses] == ["64:ff9b::808:808"]
    assert no_network.connects == [] and no_network.lookups == []


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/", "http://localhost:9/", "http://rebound.example/", "http://0/"])
def test_the_allow_setting_admits_private_targets(url, fake_dns, no_network):
    assert check_target(url, allow_private=True).addresses  # resolved (and pinned) all the same
    with pytest.raises(RefusedTarget):
        check_target(url)


@pytest.mark.parametrize(
    "spelling,address",
    [
        ("2130706433", "127.0.0.1"),
        ("0x7F000001", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("10.1.258", "10.1.1.2"),  # the last part fills the two bytes left
        ("0xa.0.0.012", "10.0.0.10"),
        ("192.168.1.1.", "192.168.1.1"),
        ("0", "0.0.0.0"),
        ("256.1.1.1", None),
        ("1.2.3.4.5", None),
        ("1.16777216", None),
        ("08.1.1.1", None),
        ("0x", None),
        ("example.com", None),
    ],
)
def test_ipv4_spellings_read_as_resolvers_read_them(spelling, address):
    parsed = ipv4_spelling(spelling)
    assert (None if parsed is None else str(parsed)) == address


def test_submission_refuses_internal_targets_with_400_and_creates_nothing(server, fake_dns, no_network):
    client = server.client()
    body = {"model": "tiny", "inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]}]}
    for url, reason in REFUSED_ADDRESSES + REFUSED_NAMES:
        r = client.post("/v1/predictions", json={**body, "webhook": url})
        assert r.status_code == 400 and reason in r.json()["error"], (url, r.text)
    assert client.get("/v1/predictions").json()["predictions"] == []
    server_address = tuple(server.host_port.split(":"))
    assert no_network.connected_beyond((server_address[0], int(server_address[1]))) == []
    assert no_network.lookups == []
