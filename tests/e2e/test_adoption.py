"""Adopting the outbox in a host app: examples/hostapp, driven as its developer would drive it.

Real ``alembic`` commands in processes of their own, run from the host's folder (which has a
``migrations/`` folder of its own), the host's own code enqueueing in its transactions, and
relay processes sending through the fake Bot API.

Here the e2e tier's tests (processes); the others are in ``tests/db/test_adoption.py``,
``tests/unit/test_adoption.py``.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

import outbox
from outbox.db import create_engine
from outbox.migrate import include_object
from outbox.schema import SCHEMA_REVISION
from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.support import ROOT, TEST_TOKEN, Relays, relay_env
from tests.support.legacy import LEGACY_ROWS, legacy_database, snapshot, versions

# The newest revision of the vazifalar domain's own history.
DOMAIN_HEAD = ScriptDirectory(
    str(importlib.resources.files("reminders.migrations"))
).get_current_head()
EXAMPLE = ROOT / "examples" / "hostapp"
INCLUDED = "alembic_included.ini"
CHECK_OK = "No new upgrade operations detected."
SCHEMA_SETTING = "--schema or OUTBOX_SCHEMA"
# The tables the outbox's revisions create (outbox_0003 adds the queue state and the chat queue).
OWN_TABLES = {
    "outbox",
    "yuborilgan",
    "bot_holati",
    "chat_navbati",
    "pauza",
    "relaylar",
    "tinch_soatlar",
    "bloklangan",
}


# outbox.configure (and an in-process CLI's --schema) set a process-wide value.
pytestmark = pytest.mark.usefixtures("schema_setting_restored")


class Host:
    """The example app's commands, each a process of its own, run from the app's folder."""

    def __init__(self, url: str, **env: str) -> None:
        self.url = url
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
        self.env.update(OUTBOX_DATABASE_URL=url, TELEGRAM_BOT_TOKEN=TEST_TOKEN, **env)

    def run(self, *argv: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, *argv],
            cwd=EXAMPLE,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == expect, (
            f"{argv} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
        )
        return done

    def alembic(self, *argv: str, ini: str = "alembic.ini") -> str:
        return self.run("-m", "alembic", "-c", ini, *argv).stdout

    def outbox(self, *argv: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
        return self.run("-m", "outbox.cli", *argv, expect=expect)

    def app(self, *argv: str) -> str:
        return self.run("-m", "hostapp", *argv).stdout.strip()


def problem_line(stderr: str) -> str:
    """The one line a refused command prints (after its start-up log line), without traceback."""
    lines = [line for line in stderr.splitlines() if line.startswith("outbox:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def tables(url: str, schema: str) -> set[str]:
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        )
        return {r[0] for r in found}


def drain(url: str, fake: FakeTelegram, tmp_path: Path, **settings: str) -> str:
    """One relay process that sends everything due, then exits; returns its summary line."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    with Relays(relay_env(url, fake.api_url, **settings), tmp_path).running() as group:
        relay = group.start("--drain")
        assert relay.wait(60) == 0, relay.describe()
        return relay.stdout.strip()


def shop_traffic(host: Host) -> list[str]:
    """Orders placed through the app's sync and async code (psycopg and asyncpg), one of them
    withdrawn before it went out; the texts the customers must receive."""
    customer = host.app("customer", "Dilnoza", "5001")
    first = host.app("order", customer, "tea")
    second = host.app("order-async", customer, "plov")
    third = host.app("order-async", customer, "non", "--driver", "asyncpg")
    withdrawn = host.app("order", customer, "melon")
    assert host.app("cancel", withdrawn) == "withdrawn"
    return [
        f"Order {first}: tea is confirmed",
        f"Order {second}: plov is confirmed",
        f"Order {third}: non is confirmed",
    ]


def delivered_once(fake: FakeTelegram, texts: list[str]) -> None:
    assert sorted(d.text for d in fake.delivered_to(5001)) == sorted(texts)


# --- set-up (a): `outbox migrate` beside the host's `alembic upgrade head` --------------------


@pytest.mark.parametrize("outbox_first", [False, True], ids=["host-first", "outbox-first"])
def test_outbox_migrate_beside_the_host_in_either_order_any_number_of_times(
    outbox_first: bool, empty_db_url: str, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    host = Host(empty_db_url)
    steps: list[Callable[[], object]] = [
        lambda: host.alembic("upgrade", "head"),
        lambda: host.outbox("migrate"),
    ]
    if outbox_first:
        steps.reverse()
    for step in steps * 2:
        step()

    # Two histories, two version tables: the host's revision 0001 is its own.
    assert versions(empty_db_url, "alembic_version") == {"0001"}
    assert versions(empty_db_url, "outbox_alembic_version") == {SCHEMA_REVISION}
    assert {"customer", "shop_order", "outbox", "yuborilgan"} <= tables(empty_db_url, "public")
    # The host's domain is the host's: the vazifalar tables are not the outbox's to make.
    assert not {"vazifa", "foydalanuvchi"} & tables(empty_db_url, "public")
    assert CHECK_OK in host.alembic("check")

    texts = shop_traffic(host)
    assert "3 sent" in drain(empty_db_url, fake_telegram, tmp_path)
    delivered_once(fake_telegram, texts)
    assert "bajarildi      3" in host.outbox("status").stdout


# --- set-up (b): the outbox's revisions inside the host's own Alembic run ---------------------


@pytest.mark.parametrize("host_at_head", [True, False], ids=["host-at-its-head", "fresh"])
def test_outbox_history_included_in_the_hosts_alembic_in_a_schema_of_its_own(
    host_at_head: bool, empty_db_url: str, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    host = Host(empty_db_url, OUTBOX_SCHEMA="shop_outbox")
    if host_at_head:
        host.alembic("upgrade", "head")  # the app as it was before adopting the outbox
        assert versions(empty_db_url, "alembic_version") == {"0001"}
    for _ in range(2):
        host.alembic("upgrade", "heads", ini=INCLUDED)

    # One version table, the host's, with one head per branch.
    assert versions(empty_db_url, "alembic_version") == {"0001", SCHEMA_REVISION}
    assert versions(empty_db_url, "shop_outbox.outbox_alembic_version") is None
    assert tables(empty_db_url, "shop_outbox") == OWN_TABLES
    assert not OWN_TABLES & tables(empty_db_url, "public")
    assert CHECK_OK in host.alembic("check", ini=INCLUDED)
    heads = host.alembic("heads", ini=INCLUDED)
    assert f"{SCHEMA_REVISION} (outbox) (head)" in heads

    texts = shop_traffic(host)
    assert "3 sent" in drain(empty_db_url, fake_telegram, tmp_path, OUTBOX_SCHEMA="shop_outbox")
    delivered_once(fake_telegram, texts)

    # `outbox migrate` on tables this history owns says so, instead of creating them twice.
    refused = problem_line(host.outbox("migrate", expect=5).stderr)
    assert "schema shop_outbox" in refused and "branch outbox" in refused


# --- autogenerate ----------------------------------------------------------------------------


def _diffs(url: str, schema: str, metadata: sa.MetaData, *, filtered: bool) -> list[str]:
    options: dict[str, object] = {"include_schemas": True}
    if filtered:
        options["include_object"] = include_object
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts=options)
            return [str(diff) for diff in compare_metadata(context, metadata)]
    finally:
        engine.dispose()


@pytest.mark.parametrize("schema", ["public", "shop_outbox"])
def test_the_hosts_autogenerate_sees_the_outbox_only_without_the_filter(
    schema: str, empty_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = Host(empty_db_url, OUTBOX_SCHEMA=schema)
    host.alembic("upgrade", "head")
    host.outbox("migrate")
    monkeypatch.syspath_prepend(str(EXAMPLE))
    outbox.configure(schema=schema)  # the Python-side setting, as a host's env.py would make it
    from hostapp.models import Base

    # Without the filter the host would write op.drop_table('outbox') into its next revision;
    # with it (even comparing every schema) nothing of the outbox's is seen.
    unfiltered = " ".join(_diffs(empty_db_url, schema, Base.metadata, filtered=False))
    assert "'outbox'" in unfiltered and "outbox_alembic_version" in unfiltered
    assert _diffs(empty_db_url, schema, Base.metadata, filtered=True) == []


def test_alembic_check_is_quiet_for_a_host_whose_search_path_starts_with_the_outboxs_schema(
    empty_db_url: str,
) -> None:
    # An app whose database (or role) defaults to a schema of its own, which it also gives the
    # outbox: autogenerate reports that schema's tables with no schema name at all.
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA shop")
        database = conn.execute("SELECT current_database()").fetchone()
        assert database is not None
        conn.execute(f'ALTER DATABASE "{database[0]}" SET search_path = shop')
    host = Host(empty_db_url, OUTBOX_SCHEMA="shop")
    host.alembic("upgrade", "head")
    host.outbox("migrate")
    assert tables(empty_db_url, "shop") >= {"customer", "outbox", "outbox_alembic_version"}
    assert CHECK_OK in host.alembic("check")


# --- a schema of the user's choice, end to end through the command line -----------------------


def test_a_custom_schema_end_to_end_through_the_command_line(
    empty_db_url: str, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    host = Host(empty_db_url)
    host.outbox("migrate", "--schema", "jobs")
    assert tables(empty_db_url, "jobs") >= {"outbox", "yuborilgan", "outbox_alembic_version"}
    assert not OWN_TABLES & tables(empty_db_url, "public")

    engine = create_engine(empty_db_url)
    try:
        with engine.begin() as conn:
            for i in range(3):
                payload = {"chat_id": 7001 + i, "text": f"jobs {i}"}
                outbox.enqueue(conn, key=f"jobs-{i}", payload=payload, schema="jobs")
        fake_telegram.script(7002, Fault.bad_request())  # chat not found: fails for good
        summary = drain(empty_db_url, fake_telegram, tmp_path / "first", OUTBOX_SCHEMA="jobs")
        assert "2 sent" in summary and "1 failed" in summary

        env_host = Host(empty_db_url, OUTBOX_SCHEMA="jobs")
        status = json.loads(env_host.outbox("status", "--json", expect=0).stdout)
        assert status["holat"]["bajarildi"] == 2 and status["holat"]["xato"] == 1
        with engine.begin() as conn:
            [failed] = outbox.failed_messages(conn, schema="jobs")
        host.outbox("replay", str(failed.id), "--schema", "jobs")
        again = drain(empty_db_url, fake_telegram, tmp_path / "again", OUTBOX_SCHEMA="jobs")
        assert "1 sent" in again
        assert sorted(d.chat_id for d in fake_telegram.delivered) == [7001, 7002, 7003]

        # A claim a relay abandoned is reaped; old done rows and their markers are pruned.
        with engine.begin() as conn:
            stuck = {"chat_id": 7009, "text": "x"}
            outbox.enqueue(conn, key="jobs-stuck", payload=stuck, schema="jobs")
            conn.execute(
                sa.text(
                    "UPDATE jobs.outbox SET holat = 'bajarilmoqda', urinish = 1, "
                    "band_vaqti = now() - interval '1 hour' WHERE kalit = 'jobs-stuck'"
                )
            )
        reaped = host.outbox("reap", "--schema", "jobs", "--lease", "1m").stdout
        assert "reaped: 1 back to kutmoqda" in reaped
        pruned = env_host.outbox("prune", "--older-than", "0s", "--markers-older-than", "0s").stdout
        assert "pruned 3 bajarildi rows" in pruned
        assert json.loads(env_host.outbox("status", "--json").stdout)["holat"] == {
            "kutmoqda": 1, "bajarilmoqda": 0, "bajarildi": 0, "xato": 0
        }  # fmt: skip
    finally:
        engine.dispose()
    # The default schema was never touched, and status there says the outbox is not there.
    missing = host.outbox("status", expect=5).stderr
    assert "schema public" in missing and "outbox migrate" in missing


# --- a database that already has an `outbox` table of its own ---------------------------------


def test_an_unrelated_outbox_table_is_refused_in_one_line_naming_the_schema_setting(
    empty_db_url: str, fake_telegram: FakeTelegram
) -> None:
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE outbox (id serial PRIMARY KEY, topic text, body jsonb)")
        conn.execute("INSERT INTO outbox (topic, body) VALUES ('order.placed', '{}')")
    host = Host(empty_db_url, OUTBOX_TELEGRAM_API_URL=fake_telegram.api_url)
    for argv in (["migrate"], ["status"], ["relay", "--drain"]):
        refused = problem_line(host.outbox(*argv, expect=5).stderr)
        assert "already has a table named outbox" in refused and SCHEMA_SETTING in refused

    # The way out the line names: the outbox in a schema of its own, the table left alone.
    host.outbox("migrate", "--schema", "telegram")
    Host(empty_db_url, OUTBOX_SCHEMA="telegram").outbox("status")
    with psycopg.connect(empty_db_url) as conn:
        assert conn.execute("SELECT topic FROM public.outbox").fetchall() == [("order.placed",)]


# --- upgrading a database made by version 0.1 --------------------------------------------------


@pytest.mark.parametrize("command", ["reminders migrate", "outbox migrate"])
def test_a_database_of_version_0_1_is_upgraded_without_losing_a_row(
    command: str, empty_db_url: str
) -> None:
    legacy_database(empty_db_url)
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute(LEGACY_ROWS)
    assert versions(empty_db_url, "alembic_version") == {"0001"}
    before = snapshot(empty_db_url)

    host = Host(empty_db_url)
    program, verb = command.split()
    for _ in range(2):
        host.run("-m", f"{program}.cli", verb)

    assert snapshot(empty_db_url) == before
    assert versions(empty_db_url, "outbox_alembic_version") == {SCHEMA_REVISION}
    # The shared table gave up the outbox's revision: a host history can use it now.
    assert versions(empty_db_url, "alembic_version") == set()
    domain = versions(empty_db_url, "reminders_alembic_version")
    assert domain == ({DOMAIN_HEAD} if program == "reminders" else None)
    status = json.loads(host.outbox("status", "--json").stdout)
    assert status["holat"] == {"kutmoqda": 1, "bajarilmoqda": 1, "bajarildi": 1, "xato": 1}


# --- the runtime import graph ---------------------------------------------------------------


def test_first_runs_that_race_on_a_database_of_version_0_1_adopt_it_once(empty_db_url: str) -> None:
    legacy_database(empty_db_url)
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute(LEGACY_ROWS)
    before = snapshot(empty_db_url)
    host = Host(empty_db_url)
    argv = [sys.executable, "-m", "outbox.cli", "migrate"]
    racing = [
        subprocess.Popen(argv, cwd=EXAMPLE, env=host.env, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    errors = [proc.communicate(timeout=120)[1] for proc in racing]
    assert [proc.returncode for proc in racing] == [0] * 4, errors
    assert snapshot(empty_db_url) == before
    assert versions(empty_db_url, "outbox_alembic_version") == {SCHEMA_REVISION}


@pytest.fixture
def app_user(empty_db_url: str) -> Iterator[tuple[str, str]]:
    """A login role with no privilege beyond connecting, as a DBA would create for an app
    (the embedded server trusts local connections, so it needs no password)."""
    if os.environ.get("OUTBOX_TEST_DATABASE_URL"):
        pytest.skip("logs in as a new role: needs the embedded server's trust authentication")
    role = f"app_{uuid.uuid4().hex[:8]}"
    parts = urlsplit(empty_db_url)
    url = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname or ''}"))
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        yield role, url
    finally:
        with psycopg.connect(empty_db_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_an_app_user_migrates_the_schema_it_owns_without_create_on_the_database(
    app_user: tuple[str, str], empty_db_url: str
) -> None:
    role, url = app_user
    host = Host(url)
    refused = problem_line(host.outbox("migrate", expect=3).stderr)
    assert f"refused user {role}: permission denied for schema public" in refused

    # What a DBA grants an app: a schema of its own, or CREATE on public; not on the database.
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        for schema in ("shop_outbox", "shop_jobs"):
            conn.execute(f"CREATE SCHEMA {schema} AUTHORIZATION {role}")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {role}")
    host.outbox("migrate", "--schema", "shop_outbox")
    host.outbox("migrate")
    Host(url, OUTBOX_SCHEMA="shop_jobs").alembic("upgrade", "heads", ini=INCLUDED)
    assert tables(empty_db_url, "shop_jobs") == OWN_TABLES
    assert versions(empty_db_url, "shop_outbox.outbox_alembic_version") == {SCHEMA_REVISION}
    assert versions(empty_db_url, "outbox_alembic_version") == {SCHEMA_REVISION}
