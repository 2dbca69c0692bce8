"""The deployment files of deploy/, each checked by the tool that reads it: systemd-analyze
for the units, promtool for the alert rules and their unit tests, docker-compose for the
compose file; the dashboard and the rules against the metrics a running relay exports.

Here the e2e tier's tests (processes); the others are in ``tests/unit/test_deploy.py``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from outbox import enqueue
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import TEST_TOKEN, Relays, free_port, states, wait_until
from tests.support.deploy import HEALTHCHECK, RULES, dashboard_expressions, metric_names, run
from tests.support.webpage import running_web

# Metrics the rules and the dashboard may name that are not the relay's own: Prometheus' `up`
# and node_exporter's systemd collector (the status and health timers).
OTHERS_METRICS = {"up", "node_systemd_unit_state"}


# --- Prometheus ------------------------------------------------------------------------------


def rule_expressions() -> list[str]:
    # The rules file is YAML; its expressions are the `expr:` entries, one-line or folded.
    text = RULES.read_text()
    found = re.findall(r"expr: >-\n((?:\s{10}.*\n)+)|expr: (.+)\n", text)
    exprs = [" ".join((folded or line).split()) for folded, line in found]
    assert len(exprs) == text.count("- alert:")
    return exprs


@pytest.fixture
def relay_metrics(
    engine: sa.Engine, fake_telegram: FakeTelegram, relays: Relays, tmp_path: Path
) -> Iterator[tuple[int, set[str]]]:
    """A relay started as the units start it (the token from a file), with one message sent:
    its metrics port and the names of every sample it exports."""
    token_file = tmp_path / "telegram-bot-token"
    token_file.write_text(TEST_TOKEN + "\n")
    token_file.chmod(0o400)
    with engine.begin() as conn:
        enqueue(conn, key="m1", payload={"chat_id": 1, "text": "eslatma"})
    port = free_port()
    relay = relays.start(
        TELEGRAM_BOT_TOKEN="",
        TELEGRAM_BOT_TOKEN_FILE=str(token_file),
        OUTBOX_METRICS_PORT=str(port),
    )
    wait_until(lambda: states(engine)["bajarildi"] == 1, 30, "the message", explain=relay.describe)
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    yield port, names - {""}
    assert relay.stop() == 0, relay.describe()


def test_the_rules_and_the_dashboard_name_only_what_a_relay_exports(
    relay_metrics: tuple[int, set[str]],
) -> None:
    port, exported = relay_metrics
    assert "outbox_relay_messages_total" in exported
    for expr in rule_expressions() + dashboard_expressions():
        assert metric_names(expr), expr
        unknown = metric_names(expr) - exported - OTHERS_METRICS
        assert not unknown, f"{expr} names {unknown}, which the relay does not export"
    # ... and the dashboard shows every metric the relay exports.
    shown = set().union(*(metric_names(e) for e in dashboard_expressions()))
    relay_own = {n for n in exported if n.startswith("outbox_")}
    assert relay_own <= shown, f"not on the dashboard: {relay_own - shown}"

    # The health check of the units and the image passes against the relay's /healthz.
    healthy = run(sys.executable, HEALTHCHECK, f"http://127.0.0.1:{port}/healthz")
    assert healthy.returncode == 0, healthy.stderr


# --- the health check ------------------------------------------------------------------------


def test_the_web_containers_health_check_passes_against_the_page(
    db_url: str, tmp_path: Path
) -> None:
    password = tmp_path / "web-password"
    password.write_text("a long operator password\n")
    with running_web(
        db_url, tmp_path, "--host", "0.0.0.0", OUTBOX_WEB_PASSWORD_FILE=str(password)
    ) as page:
        checked = run(sys.executable, HEALTHCHECK, f"{page.url}/login")
    assert checked.returncode == 0, checked.stderr
