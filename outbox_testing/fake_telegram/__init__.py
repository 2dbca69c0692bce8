"""A fake Telegram Bot API server that speaks Telegram's real HTTP protocol.

python-telegram-bot runs its real HTTP stack against it: ``/bot<token>/getMe`` and
``/bot<token>/sendMessage`` with form, JSON or multipart bodies, Telegram's exact JSON envelopes
and status codes. Faults can be scripted per chat, Telegram's rate limits can be enforced, and
every request and delivery is recorded with timestamps. A small control API under ``/_fake/``
drives a fake running in another process.

For a bot that receives updates the fake also plays the people: a test posts a user's message
(``post_message``) or a press of an inline button (``press_button``), and the bot reads them
with ``getUpdates`` (offsets and long polling as Telegram does them) or receives them on its
webhook (``setWebhook``: the fake POSTs each update with the secret-token header until the bot
answers 200). ``answerCallbackQuery`` and ``editMessageText`` answer as the real server does,
errors included (a query answered twice, a message not modified). Unlike the real server, two
bots may long-poll at once: Telegram answers the second with 409 Conflict, the fake hands both
the same updates, which is the worst case a bot's own duplicate check must survive.

Rate limits (``enforce_limits``) are kept for each bot apart, as Telegram keeps them; limits.py
says which.

The modules, one concern each:

- ``server``: ``FakeTelegram`` (the Bot API routes, sendMessage, the records and scripting,
  start and stop, in a thread too) and ``serve_forever`` (``outbox fake-telegram``);
- ``people``: the users' side (updates, getUpdates, the webhook, callback queries, edits);
- ``kinds``: the messages beyond sendMessage (media by file_id or URL, albums, locations, polls,
  copies) and the follow-ups on a sent message (caption, keyboard and media edits, deletes,
  pins), checked with python-telegram-bot's own classes where it has them; ``acted`` records
  the follow-ups, ``Delivered.method`` and ``.media`` what each message was;
- ``control``: the control API under ``/_fake/``;
- ``checks``: what Telegram accepts (tokens, chat ids, HTML, text, inline keyboards);
- ``limits``: one bot's rate limiter;
- ``records``: ``Delivered``, ``Edited``, ``CallbackAnswer``, ``RequestRecord``, ``Fault``;
- ``wire``: Telegram's JSON envelopes, and a request's parameters.
"""

from __future__ import annotations

from .checks import MAX_TEXT_LENGTH, TOKEN_RE, parse_html
from .records import Acted, CallbackAnswer, Delivered, Edited, Fault, RequestRecord
from .server import FakeTelegram, serve_forever

__all__ = [
    "MAX_TEXT_LENGTH",
    "TOKEN_RE",
    "Acted",
    "CallbackAnswer",
    "Delivered",
    "Edited",
    "FakeTelegram",
    "Fault",
    "RequestRecord",
    "parse_html",
    "serve_forever",
]
