"""The agent's HTTP calls (enroll, desired tasks, credential renewal), on the standard
library.

`urllib` rather than an HTTP client library keeps the runtime's dependencies to grpcio,
protobuf, numpy and websockets: the agent makes one small request every few seconds,
so connection reuse buys nothing. TLS is verified against the system's trust store, and
the usual `https_proxy`/`no_proxy` variables apply.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

USER_AGENT = "trainhub-agent/0.1"
MAX_BODY_BYTES = 16 * 1024 * 1024  # a desired-tasks document is a few KiB per task


class HTTPError(Exception):
    """No HTTP answer came back: unreachable, refused, timed out, TLS or a bad URL."""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    reason: str = ""

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The decoded body; `ValueError` when it is not JSON."""
        return json.loads(self.body)


class Client:
    """Requests with fixed headers and a timeout; answers of any status are returned."""

    def __init__(self, headers: Mapping[str, str], timeout: float) -> None:
        self._headers = dict(headers)
        self._timeout = timeout

    def set_header(self, name: str, value: str) -> None:
        """Send `name: value` from the next request on (a renewed credential)."""
        self._headers[name] = value

    def request(self, method: str, url: str, json_body: object = None) -> Response:
        """Raises `HTTPError` when no answer came back."""
        headers = {"Accept": "application/json", **self._headers}
        data = None
        if json_body is not None:
            data = json.dumps(json_body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as answer:
                return Response(answer.status, answer.read(MAX_BODY_BYTES), answer.reason)
        except urllib.error.HTTPError as error:  # an answer, with an error status
            with error:
                return Response(error.code, error.read(MAX_BODY_BYTES), str(error.reason))
        except urllib.error.URLError as error:
            raise HTTPError(str(error.reason) or type(error).__name__) from None
        except (OSError, http.client.HTTPException, ValueError) as error:
            raise HTTPError(str(error) or type(error).__name__) from None

    def get(self, url: str) -> Response:
        return self.request("GET", url)

    def post_json(self, url: str, body: object) -> Response:
        return self.request("POST", url, body)

    async def get_async(self, url: str) -> Response:
        """`get` in a worker thread, so the agent's event loop keeps running."""
        return await asyncio.to_thread(self.get, url)

    async def post_async(self, url: str, body: object = None) -> Response:
        """A POST in a worker thread (no body when `body` is None)."""
        return await asyncio.to_thread(self.request, "POST", url, body)
