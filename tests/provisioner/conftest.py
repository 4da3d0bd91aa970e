"""The provisioner's integration tests run the real server of the gateway tests."""

from tests.gateway.conftest import model_bytes, server  # noqa: F401
