"""The management API as the CLI uses it: one method per call, every non-2xx answer raised as `ClientError`
carrying the server's `{"error": ...}` message."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

CHUNK = 1 << 20


class ClientError(Exception):
    pass


class ApiClient:
    """What every client of the platform shares: one bearer credential (a tenant's key, or the admin token)."""

    def __init__(self, url: str, credential: str, timeout: float = 60):
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {credential}"}, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._send(method, path, **kwargs)
        return response.json() if response.content else None

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The successful response; a failure of any kind raised as `ClientError` with the server's message."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as e:
            raise ClientError(f"cannot reach {self.url}: {e}") from None
        if response.is_success:
            return response
        try:
            message = response.json()["error"]
        except (ValueError, KeyError, TypeError):
            message = response.text[:200] or response.reason_phrase
        raise ClientError(f"{response.status_code}: {message}")


class PlatformClient(ApiClient):
    """A tenant's client, holding one of its API keys."""

    def __init__(self, url: str, api_key: str | None, timeout: float = 60):
        if not api_key:
            raise ClientError("no API key: run `luminal login`, pass --api-key or set LUMINAL_API_KEY")
        super().__init__(url, api_key, timeout)

    def upload_model(self, path: Path, name: str, on_progress: Callable[[int], None] = lambda n: None) -> dict:
        """Streams the file (never read whole into memory); `on_progress` gets each chunk's size."""

        def chunks() -> Iterator[bytes]:
            with open(path, "rb") as f:
                while chunk := f.read(CHUNK):
                    on_progress(len(chunk))
                    yield chunk

        size = path.stat().st_size
        return self._call(
            "POST", "/v1/models", params={"name": name}, content=chunks(), headers={"Content-Length": str(size)}
        )

    def create_deployment(self, **spec: Any) -> dict:
        return self._call("POST", "/v1/deployments", json=spec)

    def get_deployment(self, deployment_id: int) -> dict:
        return self._call("GET", f"/v1/deployments/{deployment_id}")

    def wait_for_compile(self, deployment_id: int, timeout: float, poll_s: float = 0.25) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            deployment = self.get_deployment(deployment_id)
            if deployment["status"] != "compiling":
                return deployment
            if time.monotonic() > deadline:
                raise ClientError(f"deployment {deployment_id} still compiling after {timeout:.0f} s")
            time.sleep(poll_s)

    def usage(self, **params: Any) -> dict:
        """The usage report (`since`, `until`, `by`, `deployment_id`; None leaves a parameter out)."""
        return self._call("GET", "/v1/usage", params={k: v for k, v in params.items() if v is not None})

    # ---- models -------------------------------------------------------------------------------------------

    def list_models(self) -> list[dict]:
        return self._call("GET", "/v1/models")

    def delete_model(self, name: str, version: int | None = None) -> None:
        path = f"/v1/models/{quote(name, safe='')}" + (f"/versions/{version}" if version is not None else "")
        self._call("DELETE", path)

    def model_metadata(self, name: str, version: int | None = None) -> dict:
        """The OIP metadata of the deployed model: its inputs' and outputs' names, datatypes and shapes."""
        return self._call("GET", _oip_path(name, version))

    def infer(self, name: str, version: int | None, body: bytes, json_length: int | None) -> httpx.Response:
        """POST an OIP request; `json_length` set means binary tensors follow the JSON (Triton's extension)."""
        headers = {"Content-Type": "application/octet-stream" if json_length is not None else "application/json"}
        if json_length is not None:
            headers["Inference-Header-Content-Length"] = str(json_length)
        return self._send("POST", _oip_path(name, version) + "/infer", content=body, headers=headers)

    # ---- deployments --------------------------------------------------------------------------------------

    def list_deployments(self) -> list[dict]:
        return self._call("GET", "/v1/deployments")

    def update_deployment(self, deployment_id: int, **changes: int) -> dict:
        return self._call("PATCH", f"/v1/deployments/{deployment_id}", json=changes)

    def delete_deployment(self, deployment_id: int) -> None:
        self._call("DELETE", f"/v1/deployments/{deployment_id}")

    def list_adapters(self, deployment_id: int) -> list[dict]:
        return self._call("GET", f"/v1/deployments/{deployment_id}/adapters")

    def add_adapter(self, deployment_id: int, body: dict) -> dict:
        return self._call("POST", f"/v1/deployments/{deployment_id}/adapters", json=body)

    def remove_adapter(self, deployment_id: int, name: str) -> None:
        self._call("DELETE", f"/v1/deployments/{deployment_id}/adapters/{name}")

    # ---- traffic splits -----------------------------------------------------------------------------------

    def traffic(self, name: str) -> dict:
        return self._call("GET", _traffic_path(name))

    def set_traffic(self, name: str, split: dict[int, int]) -> dict:
        return self._call("PUT", _traffic_path(name), json={"split": {str(v): p for v, p in split.items()}})

    def clear_traffic(self, name: str) -> dict:
        return self._call("DELETE", _traffic_path(name))

    def rollback_traffic(self, name: str) -> dict:
        return self._call("POST", _traffic_path(name) + "/rollback")

    def traffic_history(self, name: str) -> list[dict]:
        return self._call("GET", _traffic_path(name) + "/history")

    # ---- API keys -----------------------------------------------------------------------------------------

    def list_keys(self) -> list[dict]:
        return self._call("GET", "/v1/keys")

    def create_key(self, name: str | None = None) -> dict:
        return self._call("POST", "/v1/keys", json={"name": name} if name is not None else {})

    def revoke_key(self, key_id: int) -> dict:
        return self._call("DELETE", f"/v1/keys/{key_id}")


def _oip_path(name: str, version: int | None) -> str:
    return f"/v2/models/{quote(name, safe='')}" + (f"/versions/{version}" if version is not None else "")


def _traffic_path(name: str) -> str:
    return f"/v1/models/{quote(name, safe='')}/traffic"
