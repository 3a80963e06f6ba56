"""A small HTTP client for TrainHub's REST API (no Django needed)."""

from __future__ import annotations

from typing import IO, Any

import httpx

from . import config


class ApiError(Exception):
    """The server refused the request or could not be reached; `message` says why, and
    `fields` holds a 400's messages by field (`{"name": ["…"]}`; empty otherwise)."""

    def __init__(
        self, message: str, status: int | None = None, fields: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.fields = fields or {}


def _describe(body: Any, prefix: str = "") -> list[str]:
    """DRF error bodies (`{"field": ["msg"]}`, nested) as `field: msg` lines."""
    if isinstance(body, dict):
        if set(body) == {"detail"} and not prefix:
            return [str(body["detail"])]
        lines = []
        for key, value in body.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            lines += _describe(value, "" if name == "non_field_errors" else name)
        return lines
    if isinstance(body, list):
        return [line for item in body for line in _describe(item, prefix)]
    return [f"{prefix}: {body}" if prefix else str(body)]


class ApiClient:
    def __init__(self, url: str, token: str | None = None, timeout: float = 30) -> None:
        headers = {"Authorization": f"Token {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=f"{self.url}/api/v1", headers=headers, timeout=timeout)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(f"cannot reach {self.url}: {exc}") from exc
        if response.status_code >= 400:
            body: Any = None
            try:
                body = response.json()
                lines = _describe(body)
            except ValueError:
                lines = [response.text.strip()[:500] or response.reason_phrase]
            fields = body if response.status_code == 400 and isinstance(body, dict) else None
            raise ApiError(
                f"{response.status_code} {response.reason_phrase}: " + "; ".join(lines),
                status=response.status_code,
                fields=fields,
            )
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json=body if body is not None else {})

    def upload(self, path: str, file: IO[bytes], filename: str, **fields: str) -> Any:
        """POST a multipart form: `file` as the field `file`, plus plain `fields`."""
        return self.request("POST", path, files={"file": (filename, file)}, data=fields)


def signed_in() -> ApiClient:
    """A client for the server and token that `trainhub login` stored."""
    login = config.load()
    return ApiClient(login.url, login.token)
