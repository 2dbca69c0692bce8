"""The users' side of the fake: the people who write to a bot and press its buttons.

Updates wait until the bot confirms them (a getUpdates offset, or a webhook's 200); the bot's
messages are kept as they stand now, for button presses and edits. ``_PeopleSide`` is a mixin of
``FakeTelegram``: it shares the server's lock, its per-chat message ids and its running state.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import secrets
import threading
import time
from typing import Any

from aiohttp import web

from .checks import _check_send, _read_markup
from .records import CallbackAnswer, Edited
from .wire import _error, _ok

_QUERY_INVALID = "Bad Request: query is too old and response timeout expired or query ID is invalid"
_NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)
_COMMAND_RE = re.compile(r"/[A-Za-z0-9_]{1,32}(?:@[A-Za-z0-9_]{1,32})?")


class _People:
    """The users' side: updates not yet confirmed by the bot, and the bot's messages as they
    stand now (for button presses and edits)."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.sent_updates: dict[int, dict[str, Any]] = {}  # every update ever posted, by id
        self.next_update_id = 700_000_001
        self.messages: dict[tuple[int, int], dict[str, Any]] = {}
        self.queries: dict[str, bool] = {}  # callback query id -> answered
        self.answers: list[CallbackAnswer] = []
        self.edits: list[Edited] = []
        self.webhook_url = ""
        self.webhook_secret: str | None = None
        # The bot's allowed_updates (getUpdates, setWebhook), kept until it names others, as
        # Telegram does; None: every kind. Updates of another kind are dropped, never offered.
        self.allowed: frozenset[str] | None = None

    def drop_unwanted(self) -> None:
        if self.allowed is not None:
            self.updates[:] = [u for u in self.updates if _kind_of(u) in self.allowed]


def _person(user_id: int, first_name: str) -> dict[str, Any]:
    return {"id": user_id, "is_bot": False, "first_name": first_name, "language_code": "uz"}


def _chat(chat_id: int, first_name: str = "") -> dict[str, Any]:
    if chat_id > 0:
        return {"id": chat_id, "first_name": first_name or f"User {chat_id}", "type": "private"}
    kind = "supergroup" if str(chat_id).startswith("-100") else "group"
    return {"id": chat_id, "title": f"Group {chat_id}", "type": kind}


def _member(user: dict[str, Any], status: str) -> dict[str, Any]:
    member: dict[str, Any] = {"user": user, "status": status}
    if status == "kicked":
        member["until_date"] = 0
    if status == "administrator":
        member.update(
            can_be_edited=False,
            can_manage_chat=True,
            can_change_info=False,
            can_delete_messages=False,
            can_invite_users=False,
            can_restrict_members=False,
            can_pin_messages=False,
            can_promote_members=False,
            can_manage_video_chats=False,
            is_anonymous=False,
            can_post_stories=False,
            can_edit_stories=False,
            can_delete_stories=False,
        )
    return member


def _kind_of(update: dict[str, Any]) -> str:
    return next(key for key in update if key != "update_id")


def _allowed(value: Any) -> frozenset[str] | None:
    """A request's allowed_updates (a JSON list, as python-telegram-bot sends it); None: the
    request names none, and the bot's earlier choice holds."""
    if value is None or value == "":
        return None
    kinds = json.loads(value) if isinstance(value, str) else value
    return frozenset(str(k) for k in kinds)


def _flag(value: Any) -> bool:
    return str(value).lower() == "true"


class _PeopleSide:
    """The users' side of ``FakeTelegram`` (see the module docstring)."""

    # Set by FakeTelegram.__init__.
    _lock: threading.Condition
    _people: _People
    _message_ids: dict[int, int]
    _runner: web.AppRunner | None
    _loop_task: asyncio.Task[None] | None

    # ---- the people: messages and button presses for a bot to receive ----

    @property
    def edits(self) -> list[Edited]:
        with self._lock:
            return list(self._people.edits)

    @property
    def callback_answers(self) -> list[CallbackAnswer]:
        with self._lock:
            return list(self._people.answers)

    def pending_updates(self) -> int:
        """Updates the bot has not confirmed yet (getUpdates offset, or a webhook's 200)."""
        with self._lock:
            return len(self._people.updates)

    def message(self, chat_id: int, message_id: int) -> dict[str, Any] | None:
        """A message of the bot as it stands now (after edits), in Telegram's JSON."""
        with self._lock:
            found = self._people.messages.get((chat_id, message_id))
            return None if found is None else copy.deepcopy(found)

    def post_message(
        self, chat_id: int, text: str, *, first_name: str = "Aziza", user_id: int | None = None
    ) -> int:
        """A person writes ``text`` in ``chat_id`` (a private chat: the user id is the chat id).

        Returns the update id. A leading /command gets its ``bot_command`` entity, as in
        Telegram, which is what command handlers look for.
        """
        sender = _person(chat_id if user_id is None else user_id, first_name)
        with self._lock:
            message: dict[str, Any] = {
                "message_id": self._next_message_id(chat_id),
                "from": sender,
                "chat": _chat(chat_id, first_name),
                "date": int(time.time()),
                "text": text,
            }
            command = _COMMAND_RE.match(text)
            if command is not None:
                length = len(command.group().encode("utf-16-le")) // 2
                message["entities"] = [{"offset": 0, "length": length, "type": "bot_command"}]
            return self._add_update({"message": message})

    def post_migration(self, chat_id: int, new_chat_id: int) -> int:
        """The group ``chat_id`` became the supergroup ``new_chat_id``: its service message."""
        with self._lock:
            message = {
                "message_id": self._next_message_id(chat_id),
                "from": _person(chat_id, "Admin") | {"id": 1},
                "chat": _chat(chat_id),
                "date": int(time.time()),
                "migrate_to_chat_id": new_chat_id,
            }
            return self._add_update({"message": message})

    def press_button(
        self,
        chat_id: int,
        message_id: int,
        *,
        data: str | None = None,
        text: str | None = None,
        first_name: str = "Aziza",
    ) -> str:
        """A person presses an inline button of the bot's message (by its data or its text).

        With ``data`` the press may be of a keyboard the message no longer has: a client still
        showing the old keyboard (a double tap before the edit arrived) sends it so. Returns
        the callback query id, which answerCallbackQuery must name.
        """
        with self._lock:
            message = self._people.messages.get((chat_id, message_id))
            if message is None:
                raise ValueError(f"no message {message_id} in chat {chat_id}")
            if data is None:
                buttons = [
                    b
                    for row in message.get("reply_markup", {}).get("inline_keyboard", [])
                    for b in row
                    if b["text"] == text and "callback_data" in b
                ]
                if not buttons:
                    raise ValueError(f"message {message_id} has no button {text!r}")
                data = str(buttons[0]["callback_data"])
            query_id = str(secrets.randbits(63))
            self._people.queries[query_id] = False
            query = {
                "id": query_id,
                "from": _person(chat_id if chat_id > 0 else 1, first_name),
                "message": copy.deepcopy(message),
                "chat_instance": str(-abs(hash(chat_id)) % 2**62),
                "data": data,
            }
            self._add_update({"callback_query": query})
            return query_id

    def post_my_chat_member(
        self, chat_id: int, *, old: str, new: str, first_name: str = "Aziza"
    ) -> int:
        """The bot's own membership in ``chat_id`` changed from ``old`` to ``new`` (a status:
        ``kicked`` when a person blocks the bot, ``member`` when they unblock it; ``left`` or
        ``kicked``, then ``member`` or ``administrator``, in a group). Returns the update id."""
        bot = {"id": 1, "is_bot": True, "first_name": "Bot", "username": "fake_bot"}
        with self._lock:
            change = {
                "chat": _chat(chat_id, first_name),
                "from": _person(chat_id if chat_id > 0 else 1, first_name),
                "date": int(time.time()),
                "old_chat_member": _member(bot, old),
                "new_chat_member": _member(bot, new),
            }
            return self._add_update({"my_chat_member": change})

    def posted_updates(self) -> list[dict[str, Any]]:
        """Every update posted so far (messages and button presses), oldest first."""
        with self._lock:
            return copy.deepcopy(list(self._people.sent_updates.values()))

    def redeliver(self, update_id: int) -> None:
        """Offer an update again, as Telegram does when a bot did not confirm it: a webhook
        that answered too late, or a poller that died before its next getUpdates (a poller
        that lives on confirms it away with its next offset, as with Telegram)."""
        with self._lock:
            self._people.updates.append(copy.deepcopy(self._people.sent_updates[update_id]))
            self._lock.notify_all()

    def _next_message_id(self, chat_id: int) -> int:
        message_id = self._message_ids.get(chat_id, 0) + 1
        self._message_ids[chat_id] = message_id
        return message_id

    def _add_update(self, body: dict[str, Any]) -> int:
        update_id = self._people.next_update_id
        self._people.next_update_id += 1
        self._people.updates.append({"update_id": update_id, **body})
        self._people.sent_updates[update_id] = copy.deepcopy(self._people.updates[-1])
        self._lock.notify_all()
        return update_id

    # ---- Bot API: the methods of a bot that receives updates ----

    async def _get_updates(self, params: dict[str, Any]) -> web.Response:
        """Confirm the updates below ``offset``; wait up to ``timeout`` s for newer ones."""
        try:
            offset = int(params.get("offset") or 0)
            limit = min(max(int(params.get("limit") or 100), 1), 100)
            timeout = min(max(float(params.get("timeout") or 0), 0.0), 50.0)
        except ValueError:
            return _error(400, "Bad Request: invalid getUpdates parameters")
        with self._lock:
            if self._people.webhook_url:
                return _error(
                    409,
                    "Conflict: can't use getUpdates method while webhook is active; "
                    "use deleteWebhook to delete the webhook first",
                )
            allowed = _allowed(params.get("allowed_updates"))
            if allowed is not None:
                self._people.allowed = allowed or None  # []: every kind again
            self._people.drop_unwanted()
            updates = self._people.updates
            if offset < 0:
                del updates[: max(0, len(updates) + offset)]
            elif offset > 0:
                updates[:] = [u for u in updates if u["update_id"] >= offset]
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                self._people.drop_unwanted()
                batch = list(self._people.updates[:limit])
            if batch or time.monotonic() >= deadline or self._runner is None:
                return _ok(batch)
            await asyncio.sleep(0.02)

    def _answer_callback_query(self, params: dict[str, Any], _token: str) -> web.Response:
        query_id = str(params.get("callback_query_id") or "")
        text = params.get("text")
        with self._lock:
            if self._people.queries.get(query_id, True):  # unknown, or answered already
                return _error(400, _QUERY_INVALID)
            self._people.queries[query_id] = True
            self._people.answers.append(
                CallbackAnswer(
                    query_id, None if text is None else str(text), _flag(params.get("show_alert"))
                )
            )
            self._lock.notify_all()
        return _ok(True)

    def _edit_message_text(self, params: dict[str, Any], _token: str) -> web.Response:
        if params.get("inline_message_id"):
            return _error(400, "Bad Request: the fake has no inline messages")
        chat_id, text, plain, _parse_mode, problem = _check_send(params)
        markup, markup_problem = _read_markup(params.get("reply_markup"))
        problem = problem or markup_problem
        try:
            message_id = int(params.get("message_id") or 0)
        except ValueError:
            message_id = 0
        if problem is not None or chat_id is None:
            return _error(400, f"Bad Request: {problem}")
        with self._lock:
            message = self._people.messages.get((chat_id, message_id))
            if message is None:
                return _error(400, "Bad Request: message to edit not found")
            if message["text"] == plain and message.get("reply_markup") == markup:
                return _error(400, _NOT_MODIFIED)
            # Without reply_markup the edit takes the inline keyboard away, as Telegram does.
            message["text"] = plain
            message.pop("reply_markup", None)
            if markup is not None:
                message["reply_markup"] = markup
            message["edit_date"] = int(time.time())
            self._people.edits.append(Edited(chat_id, message_id, text, markup, time.time()))
            self._lock.notify_all()
            return _ok(copy.deepcopy(message))

    def _set_my_commands(self, _params: dict[str, Any], _token: str) -> web.Response:
        return _ok(True)

    def _set_webhook(self, params: dict[str, Any], _token: str) -> web.Response:
        url = str(params.get("url") or "")
        if url and not url.startswith(("http://", "https://")):
            return _error(
                400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook"
            )
        with self._lock:
            self._people.webhook_url = url
            self._people.webhook_secret = params.get("secret_token") or None
            allowed = _allowed(params.get("allowed_updates"))
            if allowed is not None:
                self._people.allowed = allowed or None
            if _flag(params.get("drop_pending_updates")):
                self._people.updates.clear()
        if url and self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._push_updates())
        return _ok(True, "Webhook was set" if url else "Webhook was deleted")

    def _delete_webhook(self, params: dict[str, Any], token: str) -> web.Response:
        with self._lock:
            was_set = bool(self._people.webhook_url)
        response = self._set_webhook(
            {"drop_pending_updates": params.get("drop_pending_updates")}, token
        )
        return response if was_set else _ok(True, "Webhook is already deleted")

    def _webhook_info(self, _params: dict[str, Any], _token: str) -> web.Response:
        with self._lock:
            info = {
                "url": self._people.webhook_url,
                "has_custom_certificate": False,
                "pending_update_count": len(self._people.updates),
            }
        return _ok(info)

    async def _push_updates(self) -> None:
        """Deliver updates to the webhook one at a time, each until the bot answers 200."""
        import aiohttp  # noqa: PLC0415 - the client side is needed only with a webhook

        async with aiohttp.ClientSession() as client:
            while self._runner is not None:
                with self._lock:
                    url, secret = self._people.webhook_url, self._people.webhook_secret
                    self._people.drop_unwanted()
                    update = self._people.updates[0] if self._people.updates else None
                if not url or update is None:
                    await asyncio.sleep(0.02)
                    continue
                headers = {} if secret is None else {"X-Telegram-Bot-Api-Secret-Token": secret}
                try:
                    async with client.post(url, json=update, headers=headers) as answer:
                        delivered = answer.status == 200
                except (aiohttp.ClientError, OSError):
                    delivered = False
                if delivered:
                    with self._lock:
                        if self._people.updates and self._people.updates[0] is update:
                            self._people.updates.pop(0)
                else:
                    await asyncio.sleep(0.2)
