"""Where a webhook may be sent: only to public internet addresses, never into the network the gateway runs in.

A webhook URL is chosen by a client, and the gateway POSTs to it from inside the platform's network, so an
unchecked URL lets any tenant reach what only the gateway can: the cloud metadata service at 169.254.169.254,
Redis or PostgreSQL on a private address, the gateway itself on loopback. So a target is refused when its
address is loopback, private, link-local, multicast, reserved, unspecified or otherwise not globally routable,
in IPv4 or IPv6, including an IPv4 address carried inside an IPv6 one (IPv4-mapped, NAT64, 6to4), and in the
odd IPv4 spellings resolvers accept (2130706433, 0x7f000001, 0177.0.0.1, 127.1). A name is resolved and refused
when any of its addresses is refused, so that which address is used later cannot matter.

`check_target` is called twice: at submission, so the client hears at once why its URL is refused, and again at
delivery, whose `Target` holds the very addresses the delivery connects to (a name can resolve elsewhere by
then: DNS rebinding). `allow_private` (LUMINAL_WEBHOOK_ALLOW_PRIVATE) turns the address rule off, for local
development and tests whose receivers listen on loopback.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
DEFAULT_PORTS = {"http": 80, "https": 443}
ALLOW_HINT = "webhooks go only to public addresses (LUMINAL_WEBHOOK_ALLOW_PRIVATE=true allows others, for development)"

# One part of an IPv4 address as inet_aton reads it: hexadecimal, octal (a leading 0) or decimal.
_IPV4_PART = re.compile(r"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*")
# NAT64's well-known prefix (RFC 6052) carries an IPv4 address in its last 32 bits, which a NAT64 gateway then
# connects to; the local-use prefix (RFC 8215) is the operator's own network.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")


class RefusedTarget(ValueError):
    """The webhook URL may not be called; the message names why."""


@dataclass(frozen=True)
class Target:
    """A checked webhook URL and the addresses a delivery may connect to, every one of them checked."""

    url: httpx.URL
    addresses: tuple[IPAddress, ...]

    @property
    def host_header(self) -> str:
        """What the receiver expects in Host: the URL's own host (and port), whatever address is connected to."""
        return self.url.netloc.decode("ascii")

    @property
    def server_name(self) -> str:
        """The name TLS sends (SNI) and checks the certificate against."""
        return self.url.raw_host.decode("ascii")

    def url_at(self, address: IPAddress) -> httpx.URL:
        """The URL with its host replaced by `address`: connecting there cannot resolve the name again."""
        return self.url.copy_with(host=str(address))


def ipv4_spelling(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address `host` spells in any form inet_aton accepts (1 to 4 parts, each decimal, 0x-hex or
    0-octal, the last filling the bytes left: 127.1 is 127.0.0.1), else None."""
    parts = host.removesuffix(".").split(".")
    if not 1 <= len(parts) <= 4 or not all(_IPV4_PART.fullmatch(p) for p in parts):
        return None
    *leading, last = (_ipv4_part(p) for p in parts)
    if any(v > 255 for v in leading) or last >= 256 ** (5 - len(parts)):
        return None
    number = last
    for i, v in enumerate(leading):
        number += v << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def _ipv4_part(text: str) -> int:
    if text[:2] in ("0x", "0X"):
        return int(text, 16)
    return int(text, 8) if len(text) > 1 and text[0] == "0" else int(text)


def address_literal(host: str) -> IPAddress | None:
    """The address `host` is written as (IPv6 without its brackets, IPv4 in any spelling), or None for a name."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])  # an IPv6 zone (fe80::1%eth0) names no other address
    except ValueError:
        return ipv4_spelling(host)


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour  # 2002::/16 routes to the IPv4 address in bits 16-48


def refusal(address: IPAddress) -> str | None:
    """Why a webhook may not go to `address` ("a loopback address", "a private address", ...), else None."""
    inner = _embedded_ipv4(address)
    if inner is not None:
        why = refusal(inner)
        return None if why is None else f"{why} ({inner} inside IPv6)"
    if address.is_unspecified:
        return "the unspecified address (connecting to it reaches this machine)"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (where cloud metadata services answer)"
    if address.is_multicast:
        return "a multicast address"
    if address.is_reserved:
        return "a reserved address"
    if address.is_private or (
        isinstance(address, ipaddress.IPv6Address) and (address.is_site_local or address in _NAT64_LOCAL)
    ):
        return "a private address"
    if not address.is_global:
        return "an address that is not publicly routable"  # shared address space (100.64.0.0/10) and the like
    return None


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to for a TCP connection (tests replace this to resolve without DNS)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        raise RefusedTarget(f"the webhook host {host!r:.100} does not resolve: {e}") from None
    found = dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos)
    return list(found)


def check_target(url: str, allow_private: bool = False) -> Target:
    """The URL's target with the addresses to connect to; RefusedTarget when any of them may not be called.
    Blocking (it may ask DNS): call it from a worker thread in async code."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as e:
        raise RefusedTarget(f"the webhook URL is malformed: {e}") from None
    if parsed.scheme not in DEFAULT_PORTS or not parsed.raw_host:
        raise RefusedTarget("the webhook URL must be http:// or https:// with a host")
    host = parsed.raw_host.decode("ascii")
    port = parsed.port or DEFAULT_PORTS[parsed.scheme]
    literal = address_literal(host)
    if literal is None and not allow_private and _is_loopback_name(host):
        raise RefusedTarget(f"the webhook host {host!r:.100} is a loopback name; {ALLOW_HINT}")
    addresses = [literal] if literal is not None else resolve(host, port)
    if not addresses:
        raise RefusedTarget(f"the webhook host {host!r:.100} resolves to no address")
    if not allow_private:
        for address in addresses:
            why = refusal(address)
            if why is not None:
                verb = "is" if literal is not None else "resolves to"
                raise RefusedTarget(f"the webhook host {host!r:.100} {verb} {address}, {why}; {ALLOW_HINT}")
    return Target(parsed, tuple(addresses))


def _is_loopback_name(host: str) -> bool:
    # RFC 6761: localhost and every name under it are this machine, whatever a resolver would answer.
    name = host.removesuffix(".").lower()
    return name == "localhost" or name.endswith(".localhost")
