"""The control API under ``/_fake/``: it drives a fake running in another process (records,
scripted faults, people's messages and button presses, latency and limits)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .records import Fault
from .wire import _json_response

if TYPE_CHECKING:
    from .server import FakeTelegram


class _Control:
    """The handlers of ``/_fake/{what}`` for one fake."""

    def __init__(self, fake: FakeTelegram) -> None:
        self.fake = fake

    async def get(self, request: web.Request) -> web.Response:
        fake, what = self.fake, request.match_info["what"]
        if what == "stats":
            return _json_response(200, fake.stats())
        if what == "delivered":
            chat = request.query.get("chat_id")
            rows = fake.delivered if chat is None else fake.delivered_to(int(chat))
            # reply_markup only where there is one: the older records' shape stays as it was.
            return _json_response(
                200,
                [
                    {k: v for k, v in asdict(d).items() if k != "reply_markup" or v is not None}
                    for d in rows
                ],
            )
        if what == "requests":
            return _json_response(200, [asdict(r) for r in fake.requests])
        if what == "edits":
            return _json_response(200, [asdict(e) for e in fake.edits])
        if what == "answers":
            return _json_response(200, [asdict(a) for a in fake.callback_answers])
        return _json_response(404, {"ok": False, "description": "unknown control endpoint"})

    async def post(self, request: web.Request) -> web.Response:
        fake, what = self.fake, request.match_info["what"]
        try:
            body: Any = await request.json() if request.body_exists else {}
            if what == "reset":
                fake.reset()
            elif what == "script":
                chat = body.get("chat_id")
                fake.script(
                    None if chat is None else int(chat),
                    Fault.from_dict(body["fault"]),
                    body.get("times", 1),
                )
            elif what == "message":
                update_id = fake.post_message(
                    int(body["chat_id"]),
                    str(body["text"]),
                    first_name=body.get("first_name", "Aziza"),
                )
                return _json_response(200, {"ok": True, "update_id": update_id})
            elif what == "press":
                query_id = fake.press_button(
                    int(body["chat_id"]),
                    int(body["message_id"]),
                    data=body.get("data"),
                    text=body.get("text"),
                )
                return _json_response(200, {"ok": True, "callback_query_id": query_id})
            elif what == "config":
                fake.latency = float(body.get("latency", fake.latency))
                fake.enforce_limits = bool(body.get("enforce_limits", fake.enforce_limits))
                if "paid_refusal" in body:  # a description, or null to accept paid sends again
                    refusal = body["paid_refusal"]
                    fake.refuse_paid(None if refusal is None else str(refusal))
                return _json_response(
                    200,
                    {
                        "ok": True,
                        "latency": fake.latency,
                        "enforce_limits": fake.enforce_limits,
                    },
                )
            else:
                return _json_response(404, {"ok": False, "description": "unknown control endpoint"})
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return _json_response(400, {"ok": False, "description": f"{type(exc).__name__}: {exc}"})
        return _json_response(200, {"ok": True})
