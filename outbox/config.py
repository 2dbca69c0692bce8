"""The relay's configuration: one frozen object with named defaults, validated when built."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from outbox.errors import ConfigError
from outbox.ratelimit import RateLimits
from outbox.retry import RetryPolicy
from outbox.schema import DEFAULT_QUEUE, current_schema, validate_queue, validate_schema

__all__ = ["DEFAULT_API_URL", "RelayConfig", "read_token", "telegram_api_url"]

DEFAULT_API_URL = "https://api.telegram.org"  # here, not in outbox.telegram: no HTTP client to load
DEFAULT_CONCURRENCY = 128  # sends in flight
DEFAULT_BATCH_SIZE = 256  # rows a claim takes at most: a claim costs about 2 ms, plus 57 us a row
# Rows claimed beyond the free send slots, at most, so that a slot that frees up starts its next
# send at once, and the next claim runs while the outcomes of the last are written. Rows claimed
# ahead are not sent, so the crash bound of messages sent without their marker stays the
# concurrency. Two claims' worth: the pace bounds it first (what starts within 25 ms), and at
# 15,000 msg/s that is about 390 rows, which keeps every claim a whole one.
DEFAULT_CLAIM_AHEAD = 2 * DEFAULT_BATCH_SIZE
DEFAULT_SLOT_HORIZON = 0.3  # seconds
DEFAULT_POLL_INTERVAL = 30.0
DEFAULT_POLL_ONLY_INTERVAL = 1.0
DEFAULT_LEASE = 300.0
DEFAULT_GRACE = 10.0
DEFAULT_TELEGRAM_TIMEOUT = 10.0
DEFAULT_RETENTION = 7 * 86400.0
DEFAULT_MARKER_RETENTION = 30 * 86400.0
# A relay's heartbeat (its row in the fleet's register) is also its health check's probe of the
# database: at most MAX_HEARTBEAT apart, so that /healthz notices a lost database within 10 s.
DEFAULT_HEARTBEAT = 5.0
MAX_HEARTBEAT = 5.0

# Ceilings, far above any real need: a typing mistake (a rate of nan, a concurrency of
# 99999999999) is refused at start instead of a relay that spins building pools or dies at its
# first claim. The command line refuses the same values, naming the flag.
MAX_CONCURRENCY = 4096
MAX_BATCH_SIZE = 10_000  # rows per claim, rows claimed ahead, rows per prune batch
MAX_RATE = 1000.0  # messages/s per bot or per private chat (Telegram: about 30/s per bot)
MAX_GROUP_RATE = 60_000.0  # messages/min per group
MAX_ATTEMPTS = 1000
MAX_WAIT = 86400.0  # poll interval, retry base, lease grace, Telegram timeout: a day at most
MAX_DURATION = 3650 * 86400.0  # ten years: leases, retention, any duration a command takes


@dataclass(frozen=True, slots=True)
class RelayConfig:
    database_url: str
    # The PostgreSQL schema of the outbox tables; by default the configured one.
    schema: str = field(default_factory=current_schema)
    concurrency: int = DEFAULT_CONCURRENCY
    batch_size: int = DEFAULT_BATCH_SIZE
    claim_ahead: int = DEFAULT_CLAIM_AHEAD  # claimed rows waiting for a free send slot, at most
    poll_interval: float = DEFAULT_POLL_INTERVAL
    poll_only: bool = False  # no LISTEN: for PgBouncer in transaction pooling
    # LISTEN on a connection of its own to this URL (PostgreSQL itself), while claims and writes
    # go through ``database_url``, then taken as a pooler's (PgBouncer): no prepared statements.
    listen_database_url: str | None = None
    lease_seconds: float = DEFAULT_LEASE
    reap_interval: float = 60.0
    # Retention, run with the reaper: done rows after a week, sent markers after 30 days
    # (markers outlive their rows so a late re-enqueue of the same key is still caught).
    retention_seconds: float = DEFAULT_RETENTION  # 0 keeps done rows forever
    marker_retention_seconds: float = DEFAULT_MARKER_RETENTION
    prune_batch_size: int = 1000
    grace_seconds: float = DEFAULT_GRACE  # shutdown: how long in-flight sends may finish
    # How long a send waits for the Bot API's answer (the sender's read timeout).
    telegram_timeout: float = DEFAULT_TELEGRAM_TIMEOUT
    # Outcomes are written as soon as the previous write is done (group commit), and at least
    # this often.
    flush_interval: float = 0.02
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    rate_limits: RateLimits = field(default_factory=RateLimits)
    # The queues this relay serves, all of its one bot (the token): they share its limits.
    queues: tuple[str, ...] = (DEFAULT_QUEUE,)
    # How far ahead a claim may reserve the bot's send slots for the fleet: a relay that dies
    # holding them holds back the others' sends this long at most. It is also how long a
    # newly due row of a higher priority waits behind the slots lower ones already hold: with
    # 1 s, a reply during a broadcast took 1.0-2.5 s; with 0.3 s, 0.3 s (bench part 9).
    slot_horizon: float = DEFAULT_SLOT_HORIZON
    heartbeat_interval: float = DEFAULT_HEARTBEAT  # seconds between the register's heartbeats

    def __post_init__(self) -> None:
        validate_schema(self.schema)
        if not self.queues:
            raise ConfigError("a relay serves at least one queue")
        for queue in self.queues:
            validate_queue(queue)
        if not 0 < self.slot_horizon <= 60:
            raise ConfigError("slot-horizon must be between 0 and 60 seconds")
        if not 0 < self.heartbeat_interval <= MAX_HEARTBEAT:
            raise ConfigError(f"heartbeat must be longer than 0s and at most {MAX_HEARTBEAT:g}s")
        self._check_ranges()
        for name in ("poll_interval", "lease_seconds", "reap_interval", "flush_interval"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name.replace('_', '-')} must be positive")
        if self.retention_seconds and self.marker_retention_seconds < self.retention_seconds:
            raise ConfigError("marker retention must be at least the retention of done rows")
        if self.listen_database_url is not None and self.poll_only:
            raise ConfigError(
                "--listen-database-url is for LISTEN, which --poll-only switches off: use one"
            )
        if self.grace_seconds < 0:
            raise ConfigError("grace period cannot be negative")
        if self.telegram_timeout <= 0:
            raise ConfigError("telegram-timeout must be positive")
        # A claim must outlive the send that holds it: the send may wait the Telegram timeout
        # for its answer, and a stopping relay lets it run for the grace period. A shorter lease
        # is reaped mid-send, and the message goes out again from another claim.
        if self.lease_seconds < self.telegram_timeout + self.grace_seconds:
            raise ConfigError(
                f"lease ({self.lease_seconds:g}s) must be at least the Telegram timeout plus "
                f"the grace period ({self.telegram_timeout:g}s + {self.grace_seconds:g}s): "
                "a shorter claim expires while its message is being sent, and it is sent again"
            )

    def _check_ranges(self) -> None:
        counts = {
            "concurrency": MAX_CONCURRENCY,
            "batch_size": MAX_BATCH_SIZE,
            "prune_batch_size": MAX_BATCH_SIZE,
        }
        for name, most in counts.items():
            if not 1 <= getattr(self, name) <= most:
                raise ConfigError(f"{name.replace('_', '-')} must be between 1 and {most}")
        if not 0 <= self.claim_ahead <= MAX_BATCH_SIZE:
            raise ConfigError(f"claim-ahead must be between 0 and {MAX_BATCH_SIZE}")
        if not 1 <= self.retry.max_attempts <= MAX_ATTEMPTS:
            raise ConfigError(f"max-attempts must be between 1 and {MAX_ATTEMPTS}")
        limits = self.rate_limits
        rates = {
            "rate-limit": (limits.per_bot, MAX_RATE),
            "paid-rate-limit": (limits.paid_per_bot, MAX_RATE),
            "chat-rate-limit": (limits.per_chat, MAX_RATE),
            "group-rate-limit": (limits.per_group_per_minute, MAX_GROUP_RATE),
        }
        for label, (rate, fastest) in rates.items():
            # nan compares false with everything: "not <=" catches it with the infinities.
            if not 0 <= rate <= fastest:
                raise ConfigError(f"{label} must be between 0 and {fastest:g}, got {rate}")
        waits = {
            "poll-interval": (self.poll_interval, MAX_WAIT),
            "backoff-base": (self.retry.base_seconds, MAX_WAIT),
            "grace": (self.grace_seconds, MAX_WAIT),
            "telegram-timeout": (self.telegram_timeout, MAX_WAIT),
            "reap-interval": (self.reap_interval, MAX_WAIT),
            "flush-interval": (self.flush_interval, MAX_WAIT),
            "lease": (self.lease_seconds, MAX_DURATION),
            "retention": (self.retention_seconds, MAX_DURATION),
            "marker-retention": (self.marker_retention_seconds, MAX_DURATION),
        }
        for label, (seconds, longest) in waits.items():
            if not (math.isfinite(seconds) and seconds <= longest):
                raise ConfigError(f"{label} must be at most {longest:g} seconds, got {seconds}")


def read_token(env: dict[str, str] | None = None) -> str:
    """The bot token from TELEGRAM_BOT_TOKEN or the file named by TELEGRAM_BOT_TOKEN_FILE."""
    env = dict(os.environ) if env is None else env
    token = env.get("TELEGRAM_BOT_TOKEN", "").strip()
    path = env.get("TELEGRAM_BOT_TOKEN_FILE", "").strip()
    if not token and path:
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except OSError as err:
            raise ConfigError(
                f"cannot read TELEGRAM_BOT_TOKEN_FILE {path}: {err.strerror}"
            ) from None
    if not token:
        raise ConfigError(
            "no bot token: set TELEGRAM_BOT_TOKEN or TELEGRAM_BOT_TOKEN_FILE "
            "(the token is never accepted on the command line)"
        )
    if ":" not in token:
        raise ConfigError("the bot token does not look like a Telegram token (<digits>:<secret>)")
    return token


def telegram_api_url(env: dict[str, str] | None = None) -> str:
    env = dict(os.environ) if env is None else env
    url = env.get("OUTBOX_TELEGRAM_API_URL", "").strip() or DEFAULT_API_URL
    if not url.startswith(("http://", "https://")) or len(url.split("://", 1)[1]) == 0:
        raise ConfigError(f"OUTBOX_TELEGRAM_API_URL must be an http(s) URL, got {url!r}")
    return url
