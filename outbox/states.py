"""The values the outbox table holds by name: a row's four states and its failure codes,
spelled as the database spells them."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["TERMINAL_STATES", "FailureCode", "State"]


class State(StrEnum):
    PENDING = "kutmoqda"
    IN_PROGRESS = "bajarilmoqda"
    DONE = "bajarildi"
    FAILED = "xato"


TERMINAL_STATES = frozenset({State.DONE, State.FAILED})


class FailureCode(StrEnum):
    """Why the last attempt failed, as a word a program can test (column ``xato_turi``, and
    each ``tarix`` entry of a failure); ``oxirgi_xato`` says the same to a person, and its
    wording may change between versions, these words do not.
    """

    BLOCKED = "blocked"  # 403: the person blocked the bot or deleted their account
    FORBIDDEN = "forbidden"  # 403 for another reason (the bot was removed from the group...)
    CHAT_NOT_FOUND = "chat_not_found"  # 400: Telegram knows no such chat
    BAD_REQUEST = "bad_request"  # 400 for another reason (text too long, bad markup...)
    BAD_MEDIA = "bad_media"  # 400: Telegram cannot use the file_id or URL (or its content)
    MESSAGE_NOT_FOUND = "message_not_found"  # 400: the message to act on or reply to is gone
    CANNOT_DELETE = "cannot_delete"  # 400: Telegram refuses the delete (48 hours, rights)
    ORIGINAL_FAILED = "original_failed"  # a follow-up whose original was never sent
    BAD_PAYLOAD = "bad_payload"  # the payload is not a message the relay can send
    RATE_LIMITED = "rate_limited"  # 429: Telegram's flood control
    CHAT_MIGRATED = "chat_migrated"  # the group moved again while its resend was under way
    TRANSIENT = "transient"  # the network, a server error, a timeout: may work later
    TOO_MANY_ATTEMPTS = "too_many_attempts"  # every attempt was used: failed for good
    CLAIM_EXPIRED = "claim_expired"  # the relay holding the claim died or hung (the reaper)
    CANCELLED = "cancelled"  # an operator cancelled the waiting message
    EXPIRED = "expired"  # its expiry (eskirish) passed before it could be sent
    # Not a failure: a pending edit made pointless by a newer edit of the same method or a
    # pending delete of its message (outbox_0016). Its row is bajarildi, without a request, and
    # oxirgi_xato names the row that superseded it.
    SUPERSEDED = "superseded"
    # Not sent, no request made: the chat is known to be gone for the bot (an earlier 403
    # blocked/deactivated/kicked recorded it in bloklangan, outbox_0017) until unblock_chat.
    CHAT_BLOCKED = "chat_blocked"
