"""Who may use the page, and proof that a form was sent by the page itself (docs/web.md,
"Safety", tells the operator's side)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from outbox.errors import ConfigError

__all__ = ["Guard", "Proxies", "check_bind", "is_loopback", "read_password"]

SESSION_SECONDS = 12 * 3600
MAX_SESSIONS = 1000  # the oldest sign-in is forgotten beyond this
_LOOPBACK_NAMES = {"localhost", "localhost.", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    name = host.strip().strip("[]").lower()
    try:
        return name in _LOOPBACK_NAMES or ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def read_password(file: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The page's password from OUTBOX_WEB_PASSWORD, or from a file (never from the command
    line); None if neither is set."""
    env = os.environ if env is None else env
    password = env.get("OUTBOX_WEB_PASSWORD", "").strip()
    path = (file or "").strip()
    if not password and path:
        try:
            password = Path(path).read_text(encoding="utf-8").strip()
        except OSError as err:
            raise ConfigError(f"cannot read the password file {path}: {err.strerror}") from None
        if not password:
            raise ConfigError(f"the password file {path} is empty")
    return password or None


def check_bind(host: str, password: str | None) -> None:
    """Refuse to listen beyond this machine without a password."""
    if password is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve the page on {host} without a password: set "
            "OUTBOX_WEB_PASSWORD or OUTBOX_WEB_PASSWORD_FILE (or listen on 127.0.0.1)"
        )


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


@dataclass(frozen=True, slots=True)
class Proxies:
    """The peers whose forwarding headers are believed (none by default: anyone can send them)."""

    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Proxies:
        """Comma-separated addresses or networks: ``127.0.0.1``, ``10.0.0.0/8``, ``::1``."""
        networks = []
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            try:
                networks.append(ipaddress.ip_network(part, strict=False))
            except ValueError:
                raise ConfigError(
                    f"--trusted-proxy: {part!r} is not an IP address or network "
                    "(e.g. 127.0.0.1 or 10.0.0.0/8)"
                ) from None
        return cls(tuple(networks))

    def trusts(self, peer: str | None) -> bool:
        ip = _address(peer or "")
        return ip is not None and any(ip in net for net in self.networks)

    def client(self, peer: str | None, forwarded_for: str | None) -> str | None:
        """The client's address: the last hop in ``X-Forwarded-For`` that is not a trusted
        proxy (the ones before it could be written by the client itself)."""
        if not self.trusts(peer) or not forwarded_for:
            return peer
        for hop in reversed(forwarded_for.split(",")):
            ip = _address(hop)
            if ip is None:
                return peer  # garbage in the header: the proxy is the best we know
            if not any(ip in net for net in self.networks):
                return str(ip)
        return peer

    def https(self, peer: str | None, forwarded_proto: str | None) -> bool:
        proto = (forwarded_proto or "").split(",")[0]
        return self.trusts(peer) and proto.strip().lower() == "https"


class Guard:
    """Sessions and form tokens of one running page (both end with the process)."""

    ANONYMOUS = "-"

    def __init__(self, password: str | None, bind_host: str) -> None:
        self.password = password
        self.bind_host = bind_host.strip("[]").lower()
        self._key = secrets.token_bytes(32)
        self._sessions: dict[str, float] = {}  # session id -> expiry (time.monotonic)

    @property
    def required(self) -> bool:
        return self.password is not None

    def password_matches(self, given: str) -> bool:
        if self.password is None:
            return True
        # surrogatepass: a form may carry a lone surrogate; it is a wrong password, not a crash.
        return hmac.compare_digest(
            given.encode("utf-8", "surrogatepass"), self.password.encode("utf-8", "surrogatepass")
        )

    def sign_in(self) -> str:
        now = time.monotonic()
        self._sessions = {s: t for s, t in self._sessions.items() if t > now}
        while len(self._sessions) >= MAX_SESSIONS:
            del self._sessions[next(iter(self._sessions))]
        session = secrets.token_urlsafe(32)
        self._sessions[session] = now + SESSION_SECONDS
        return session

    # No session id is "": an absent or empty cookie is simply not one of them.
    def sign_out(self, session: str | None) -> None:
        self._sessions.pop(session or "", None)

    def session_valid(self, session: str | None) -> bool:
        expiry = self._sessions.get(session or "")
        return expiry is not None and expiry > time.monotonic()

    def bearer_password(self, header: str | None) -> str | None:
        """The password of an ``Authorization: Bearer`` header, if the page has one at all
        (the caller compares it, through the sign-in throttle)."""
        if self.password is None or not header or not header.startswith("Bearer "):
            return None
        return header.removeprefix("Bearer ").strip()

    def form_token(self, session: str | None) -> str:
        subject = session if session and self.session_valid(session) else self.ANONYMOUS
        return hmac.new(self._key, subject.encode(), hashlib.sha256).hexdigest()

    def form_token_valid(self, session: str | None, given: str) -> bool:
        # As bytes: compare_digest refuses a str holding anything but ASCII.
        return hmac.compare_digest(
            self.form_token(session).encode(), given.encode("utf-8", "surrogatepass")
        )

    def host_allowed(self, host_header: str | None) -> bool:
        """Without a password, answer only to the names of this machine: a name an attacker points
        at 127.0.0.1 (DNS rebinding) is the same origin as far as the browser knows."""
        if self.required:
            return True
        try:
            name = urlsplit(f"//{host_header or ''}").hostname or ""
        except ValueError:  # "[" and other things no browser sends
            return False
        return is_loopback(name) or name == self.bind_host

    @staticmethod
    def origin_matches(origin: str | None, host_header: str | None) -> bool:
        """A POST's Origin, if the browser sent one, must be this page's own host and port (behind
        a TLS proxy the page sees http while the browser says https); ``null`` is refused."""
        if origin is None:
            return True  # not a browser, or a very old one: the form token decides
        if not host_header:
            return False
        try:
            return urlsplit(origin).netloc.lower() == host_header.lower()
        except ValueError:  # not a URL: no browser's origin
            return False
