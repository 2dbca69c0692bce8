"""Random addresses, query strings and form posts to every route of the page (hypothesis).

Whatever arrives, signed in or not, with the right form token or without: an answer below 500,
the security headers on it, and no row changed but those the request named and was allowed to
act on.
"""

from __future__ import annotations

import logging
import urllib.parse
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.webapp import local_page
from tests.support.webpage import add_message

PASSWORD = "correct horse battery"
HEADERS = ("Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options", "Cache-Control")
OPERATOR = {"X-Forwarded-For": "192.0.2.1"}  # the page trusts 127.0.0.1 as its proxy
ROUTES = [
    ("GET", "/"),
    ("GET", "/part/overview"),
    ("GET", "/part/messages/{id}"),
    ("GET", "/messages/{id}"),
    ("GET", "/search"),
    ("GET", "/login"),
    ("GET", "/static/{id}"),
    ("GET", "/{id}"),
    *[("POST", "/messages/{id}/replay"), ("POST", "/messages/{id}/cancel"), ("POST", "/replay")]
    * 3,  # the routes that act, more often
    ("POST", "/login"),
    ("POST", "/logout"),
    ("POST", "/{id}"),
]

_WORDS = ["99999999999999d", "inf", "nan", "1e400", "-1s", "1h", "7d", "default", "eslatma",
          "\x00", "²", "١٢", "9223372036854775807", "9223372036854775808", "0", "-1", " 1 ",
          "1,2", "%", "'; DROP TABLE outbox; --", "<script>", "../.."]  # fmt: skip
words = st.one_of(st.sampled_from(_WORDS), st.text(max_size=40))


def _encoded(value: str) -> str:
    return urllib.parse.quote(value.encode("utf-8", "surrogatepass"), safe="")


# Percent-encoded text, or raw bytes percent-encoded (invalid UTF-8 included).
encoded = st.one_of(
    words.map(_encoded),
    st.binary(max_size=12).map(lambda raw: "".join(f"%{b:02X}" for b in raw)),
)


@dataclass
class World:
    ids: list[int]
    password: str | None


@st.composite
def requests(draw: st.DrawFn, world: World) -> dict[str, Any]:
    method, route = draw(st.sampled_from(ROUTES))
    known = st.sampled_from([str(i) for i in world.ids])
    some_id = st.one_of(known, known, words)
    target = route.replace("{id}", _encoded(draw(some_id)))
    names = st.sampled_from(["tur", "navbat", "since", "q", "did", "ids", "x"])
    query = draw(st.lists(st.tuples(names, encoded), max_size=4))
    if query:
        target += "?" + "&".join(f"{k}={v}" for k, v in query)
    form: dict[str, str] | None = None
    if method == "POST":
        form = {
            name: value
            for name, value in draw(
                st.dictionaries(
                    st.sampled_from(["ids", "force", "confirmed", "since", "tur", "navbat"]),
                    st.one_of(
                        st.sampled_from(["1", "0", ""]),
                        st.lists(some_id, min_size=1, max_size=4).map(",".join),
                        words,
                    ),
                    max_size=5,
                )
            ).items()
        }
        form["password"] = draw(st.sampled_from(["", "wrong", PASSWORD]))
        form["csrf"] = draw(st.sampled_from(["right", "right", "right", "", "0" * 64, "é"]))
    return {
        "method": method,
        "target": target,
        "form": form,
        "as_operator": draw(st.booleans()),
        "origin": draw(
            st.sampled_from([None, None, "self", "self", "http://evil.example", "null", "http://["])
        ),
        "bearer": draw(st.sampled_from([None, "Bearer wrong", f"Bearer {PASSWORD}"])),
        "forwarded_for": draw(st.sampled_from(["198.51.100.7", "198.51.100.8, 10.0.0.1", "x"])),
    }


def _acting(method: str, target: str, form: dict[str, str], changes: set[int]) -> dict[str, Any]:
    return {
        "method": method,
        "target": target,
        "form": {**form, "csrf": "right"},
        "as_operator": True,
        "origin": "self",
        "bearer": None,
        "forwarded_for": "",
        "changes": changes,
    }


def _rows(engine: sa.Engine) -> dict[int, tuple[Any, ...]]:
    with engine.begin() as conn:
        found = conn.exec_driver_sql(
            "SELECT o.id, o.holat, o.urinish, o.oxirgi_xato, o.tarix::text, o.keyingi_urinish, "
            "o.yangilangan, o.payload::text, y.message_id "
            "FROM outbox o LEFT JOIN yuborilgan y USING (kalit) ORDER BY o.id"
        ).all()
    return {int(r[0]): tuple(r[1:]) for r in found}


def _named_ids(request: dict[str, Any]) -> set[int]:
    """The ids a request may act on: the one in its address, or its confirmed selection."""
    parts = urllib.parse.unquote(request["target"].split("?")[0]).split("/")
    named = set()
    if len(parts) == 4 and parts[1] == "messages":
        named.add(parts[2].strip())
    form = request["form"] or {}
    if parts[1:] == ["replay"] and form.get("confirmed") == "1":
        named.update(part.strip() for part in form.get("ids", "").split(","))
    return {int(n) for n in named if n.isascii() and n.isdigit()}


def _setup(engine: sa.Engine) -> list[int]:
    ids = [add_message(engine, f"f{i}", state="xato", error="boom") for i in range(3)]
    ids += [add_message(engine, f"p{i}") for i in range(2)]
    ids.append(add_message(engine, "sent", state="bajarildi"))
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO yuborilgan (kalit, chat_id, message_id) VALUES ('f0', 42, 9)"
        )
    return ids


@pytest.mark.parametrize("password", [PASSWORD, None], ids=["password", "loopback"])
def test_no_input_gets_a_500_or_changes_what_it_may_not(
    db_url: str, engine: sa.Engine, password: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    world = World(_setup(engine), password)
    _, f1, f2, p0, _, sent = world.ids
    with (
        local_page(db_url, password=password, trusted_proxies="127.0.0.1") as page,
        caplog.at_level(logging.INFO, logger="outbox.web"),
    ):
        origin = str(page.server.make_url("/")).rstrip("/")
        tokens = {"operator": "", "anon": ""}

        sign_ins = iter(range(1, 255))

        def operator_token() -> str:
            # Signed in again if a random request signed the operator out. Each time from an
            # address of its own: the operator's random wrong passwords may have locked out the
            # last one (as they should), and the sign-in is not what this test is about.
            if password is not None and page.get("/", headers=OPERATOR, client="op").status != 200:
                address = {"X-Forwarded-For": f"203.0.113.{next(sign_ins)}"}
                page.sign_in(password, client="op", headers=address)
            tokens["operator"] = page.csrf("/", client="op")
            return tokens["operator"]

        operator_token()
        tokens["anon"] = page.csrf("/login" if password else "/", client="anon")

        @settings(
            max_examples=200 if password else 80,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
            database=None,
        )
        @given(request=requests(world))
        # The operator's own actions, so that each run also sees rows legitimately changed.
        @example(request=_acting("POST", f"/messages/{f1}/replay", {}, {f1}))
        @example(request=_acting("POST", f"/messages/{p0}/cancel", {}, {p0}))
        @example(  # the delivered one is refused, the failed one replayed
            request=_acting("POST", "/replay", {"confirmed": "1", "ids": f"{f2},{sent}"}, {f2})
        )
        def one(request: dict[str, Any]) -> None:
            as_operator = request["as_operator"]
            client = "op" if as_operator else "anon"
            headers = (
                dict(OPERATOR) if as_operator else {"X-Forwarded-For": request["forwarded_for"]}
            )
            if request["origin"] is not None:
                headers["Origin"] = origin if request["origin"] == "self" else request["origin"]
            if request["bearer"] is not None and not as_operator:
                headers["Authorization"] = request["bearer"]
            form = request["form"]
            right_token = tokens["operator" if as_operator else "anon"]
            if form is not None and form["csrf"] == "right":
                form = {**form, "csrf": right_token}
            before = _rows(engine)
            answer = page.request(
                request["method"], request["target"], form=form, headers=headers, client=client
            )
            after = _rows(engine)

            assert answer.status < 500, (request, answer.status, answer.body[-1500:])
            missing = [name for name in HEADERS if name not in answer.headers]
            assert not missing, (request, answer.status, missing)
            assert after.keys() == before.keys()
            changed = {i for i in before if before[i] != after[i]}
            bearer = headers.get("Authorization") == f"Bearer {PASSWORD}" and password is not None
            signed_in = as_operator or password is None
            may_act = bearer or (
                signed_in
                and form is not None
                and form["csrf"] == right_token
                and headers.get("Origin") in (None, origin)
            )
            allowed = _named_ids(request) if may_act and request["method"] == "POST" else set()
            assert changed <= allowed, (request, answer.status, changed, allowed)
            if "changes" in request:
                assert changed == request["changes"], (request, answer.status, answer.body[-1500:])
            if as_operator and request["target"].startswith(("/logout", "/login")):
                operator_token()  # signed out, or signed in again: a new session and token

        one()
    faults = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not faults, [r.getMessage() for r in faults]
    assert all(PASSWORD not in r.getMessage() for r in caplog.records)
