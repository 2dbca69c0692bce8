"""Telegram's HTTP envelopes: the JSON answers, and the parameters of a request."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


def _json_response(
    status: int, payload: Any, headers: dict[str, str] | None = None
) -> web.Response:
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    return web.Response(body=body, status=status, headers=headers, content_type="application/json")


def _ok(result: Any, description: str | None = None) -> web.Response:
    payload: dict[str, Any] = {"ok": True, "result": result}
    if description is not None:
        payload["description"] = description
    return _json_response(200, payload)


def _error(status: int, description: str, parameters: dict[str, int] | None = None) -> web.Response:
    payload: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    headers = None
    if parameters:
        payload["parameters"] = parameters
        if "retry_after" in parameters:
            headers = {"Retry-After": str(parameters["retry_after"])}
    return _json_response(status, payload, headers)


async def _read_params(request: web.Request) -> dict[str, Any]:
    """Merge query string and body (form, multipart or JSON), as the real server does."""
    params: dict[str, Any] = dict(request.query)
    if not request.body_exists:
        return params
    if request.content_type == "application/json":
        data = json.loads(await request.read())  # ValueError on bad JSON
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        params.update(data)
    else:
        form = await request.post()
        params.update((k, v) for k, v in form.items() if isinstance(v, str))
    return params
