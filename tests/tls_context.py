"""httpx's verifying SSL context, made once per process. Each httpx client made without one parses the CA bundle
again, 16-36 ms of CPU even for an http:// URL, and `httpx.get` makes a client per call: a readiness poll every
0.05-0.1 s spent more CPU on that than on asking (16.5 ms a poll against 0.2 ms with this context)."""

import functools
import ssl

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()
