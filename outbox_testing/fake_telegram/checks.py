"""What Telegram accepts: tokens, chat ids, Telegram-style HTML, message text, inline keyboards."""

from __future__ import annotations

import json
import re
from typing import Any

TOKEN_RE = re.compile(r"\d+:[A-Za-z0-9_-]+")
MAX_TEXT_LENGTH = 4096
_MAX_CALLBACK_DATA = 64
_PARSE_MODES = frozenset({"html", "markdown", "markdownv2"})
_ALLOWED_TAGS = frozenset(
    {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "a", "code", "pre"}
    | {"tg-spoiler", "span", "blockquote"}
)
_SPECIAL_RE = re.compile(r"[<&]")
_TAG_RE = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)(?:\s[^<>]*)?>")
_ENTITY_RE = re.compile(r"&(?:(lt|gt|amp|quot)|#([0-9]{1,7})|#[xX]([0-9A-Fa-f]{1,6}));")
_NAMED_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_INT64 = 2**63


def parse_html(text: str) -> tuple[str, str | None]:
    """Check Telegram-style HTML; return (plain text, error description or None)."""
    out: list[str] = []
    stack: list[str] = []
    i, problem = 0, None
    while problem is None and (found := _SPECIAL_RE.search(text, i)) is not None:
        out.append(text[i : found.start()])
        problem, i = _html_token(text, found.start(), out, stack)
    if problem is None and stack:
        problem = f'Can\'t find end tag corresponding to start tag "{stack[-1]}"'
    if problem is not None:
        return "", "can't parse entities: " + problem
    out.append(text[i:])
    return "".join(out), None


def _html_token(text: str, k: int, out: list[str], stack: list[str]) -> tuple[str | None, int]:
    """Consume the entity or tag at ``k``: (problem or None, next index)."""
    at = f"at byte offset {len(text[:k].encode())}"  # Telegram counts UTF-8 bytes
    if text[k] == "&":
        m = _ENTITY_RE.match(text, k)
        if m is None or (char := _decode_entity(m)) is None:
            return f"Unexpected character '&' {at}", k
        out.append(char)
        return None, m.end()
    m = _TAG_RE.match(text, k)
    if m is None:
        return f"Unexpected character '<' {at}", k
    closing, name = m.group(1) == "/", m.group(2).lower()
    problem = None
    if name not in _ALLOWED_TAGS:
        problem = f'Unsupported {"end" if closing else "start"} tag "{name}" {at}'
    elif not closing:
        stack.append(name)
    elif not stack:
        problem = f"Unexpected end tag {at}"
    elif stack[-1] != name:
        problem = f'Unmatched end tag {at}, expected "</{stack[-1]}>", found "</{name}>"'
    else:
        stack.pop()
    return problem, m.end()


def _decode_entity(m: re.Match[str]) -> str | None:
    if m.group(1):
        return _NAMED_ENTITIES[m.group(1)]
    code = int(m.group(2), 10) if m.group(2) else int(m.group(3), 16)
    return chr(code) if 0 < code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else None


def _check_send(
    params: dict[str, Any],
) -> tuple[int | None, str, str, str | None, str | None]:
    """Validate sendMessage like the real server: (chat_id, text, plain, parse_mode, problem)."""
    raw_chat = params.get("chat_id")
    text = "" if params.get("text") is None else str(params["text"])
    parse_mode = str(params.get("parse_mode") or "") or None
    if raw_chat is None or raw_chat == "":
        return None, text, text, parse_mode, "chat_id is empty"
    chat_id = _parse_chat_id(raw_chat)
    if chat_id is None:
        return None, text, text, parse_mode, "chat not found"
    plain, problem = text, None
    if parse_mode is not None and parse_mode.lower() not in _PARSE_MODES:
        problem = "unsupported parse_mode"
    elif parse_mode is not None and parse_mode.lower() == "html":
        plain, problem = parse_html(text)
    if problem is None and not plain.strip():
        problem = "message text is empty"
    elif problem is None and len(plain) > MAX_TEXT_LENGTH:  # code points, after entity parsing
        problem = "message is too long"
    return chat_id, text, plain, parse_mode, problem


def _read_markup(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """An inline keyboard from a request (a JSON string in a form): (markup, problem)."""
    if raw is None or raw == "":
        return None, None
    try:
        markup = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None, "can't parse reply keyboard markup JSON object"
    rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        return None, "can't parse inline keyboard markup JSON object"
    for row in rows:
        for button in row:
            if not isinstance(button, dict) or not str(button.get("text") or "").strip():
                return None, "can't parse inline keyboard button: Text buttons are unallowed"
            data = button.get("callback_data")
            if data is not None and not 1 <= len(str(data).encode()) <= _MAX_CALLBACK_DATA:
                return None, "BUTTON_DATA_INVALID"
    return {"inline_keyboard": rows}, None


def _parse_chat_id(raw: Any) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and re.fullmatch(r"-?[0-9]{1,19}", raw.strip()):
        value = int(raw)
    else:
        return None  # e.g. "@username": no such chat for the fake
    return value if value != 0 and -_INT64 <= value < _INT64 else None


def _bot_id(token: str) -> int:
    """The numeric part of a well-formed token is the bot's user id."""
    return int(token.split(":", 1)[0])
