"""The deployment files of deploy/, each checked by the tool that reads it: systemd-analyze
for the units, promtool for the alert rules and their unit tests, docker-compose for the
compose file; the dashboard and the rules against the metrics a running relay exports.

Here the unit tier's tests (no database); the others are in ``tests/e2e/test_deploy.py``.
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import sys
import threading
import tomllib
from pathlib import Path

import pytest

from tests.support import ROOT, free_port, missing_tool
from tests.support.deploy import (
    DEPLOY,
    HEALTHCHECK,
    RULES,
    dashboard_expressions,
    metric_names,
    run,
)

UNITS = sorted((DEPLOY / "systemd").iterdir())
SERVICES = [u for u in UNITS if u.suffix == ".service"]
LONG_RUNNING = ["outbox-relay.service", "outbox-web.service", "reminders-bot.service"]
RULE_TESTS = DEPLOY / "prometheus" / "outbox-alerts.test.yaml"


def tool(name: str, package: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if found is None:
        missing_tool(f"{name} is missing (apt-get install {package})")
    return found


def unit_settings(unit: Path) -> dict[str, list[str]]:
    """Every Key=value of a unit file, by key (systemd repeats keys, so each has a list)."""
    found: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


# --- systemd -------------------------------------------------------------------------------


def installed_units(tmp_path: Path) -> Path:
    """The units as installed, with /opt/outbox (the virtualenv they expect) pointing at this
    one: systemd-analyze verify checks that each command exists and is executable."""
    prefix, units = tmp_path / "prefix", tmp_path / "units"
    (prefix / "bin").mkdir(parents=True)
    units.mkdir()
    venv_bin = Path(sys.executable).parent
    for program in ("outbox", "reminders", "python"):
        (prefix / "bin" / program).symlink_to(venv_bin / program)
    (prefix / "healthcheck.py").symlink_to(HEALTHCHECK)
    for unit in UNITS:
        text = unit.read_text()
        assert "/opt/outbox/" in text or unit.suffix == ".timer", unit.name
        (units / unit.name).write_text(text.replace("/opt/outbox/", f"{prefix}/"))
    return units


def test_systemd_analyze_verifies_every_unit(tmp_path: Path) -> None:
    analyze = tool("systemd-analyze", "systemd")
    units = installed_units(tmp_path)
    names = sorted(p.name for p in units.iterdir())
    verified = run(analyze, "verify", *names, cwd=units)
    # verify exits 0 on a unit it only warns about (an unknown key, a value it ignores): any
    # output at all is a finding.
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout + verified.stderr == ""

    # systemd's own exposure score, 0 (locked down) to 10 (unprotected): each service is at
    # most 1.5 (1.2 when written; a unit without the hardening scores 9.6).
    for service in SERVICES:
        scored = run(
            analyze, "security", "--offline=yes", "--threshold=15", service.name, cwd=units
        )
        assert scored.returncode == 0, scored.stdout[-2000:] + scored.stderr

    # The check can fail: a misspelt key and a bad value are reported.
    relay = units / "outbox-relay.service"
    relay.write_text(
        relay.read_text().replace("PrivateTmp=yes", "PrivateTmp=maybe\nRestartSecs=5s")
    )
    broken = run(analyze, "verify", relay.name, cwd=units)
    assert "RestartSecs" in broken.stderr
    assert "maybe" in broken.stderr


def test_the_long_running_services_are_hardened_and_take_secrets_as_credentials() -> None:
    for name in LONG_RUNNING:
        settings = unit_settings(DEPLOY / "systemd" / name)
        assert settings["User"] == ["outbox"], name
        for key, value in {
            "NoNewPrivileges": "yes",
            "ProtectSystem": "strict",
            "ProtectHome": "yes",
            "PrivateTmp": "yes",
            "PrivateDevices": "yes",
            "RestrictSUIDSGID": "yes",
            "CapabilityBoundingSet": "",
            "Restart": "on-failure",
        }.items():
            assert settings.get(key) == [value], f"{name}: {key}"
        environment = " ".join(settings.get("Environment", []))
        credentials = dict(c.split(":", 1)[0:2] for c in settings.get("LoadCredential", []))
        # The database password from a pgpass credential, never in the environment file.
        assert "pgpass" in credentials, name
        assert "PGPASSFILE=%d/pgpass" in environment, name
        if name != "outbox-web.service":
            assert "telegram-bot-token" in credentials, name
            assert "TELEGRAM_BOT_TOKEN_FILE=%d/telegram-bot-token" in environment, name
        # A token or password is never written into a unit or its command line.
        assert "TELEGRAM_BOT_TOKEN=" not in environment, name
        assert not any(":" in e for e in settings["ExecStart"][0].split()[1:]), name
    relay = unit_settings(DEPLOY / "systemd" / "outbox-relay.service")
    # A restart cannot fix a rejected token (6) or a missing schema (5): no restart loop.
    assert {"5", "6"} <= set(relay["RestartPreventExitStatus"][0].split())
    assert "outbox-relay-health.timer" in relay["Wants"]


# --- Prometheus ------------------------------------------------------------------------------


def test_promtool_checks_the_rules_and_runs_their_unit_tests(tmp_path: Path) -> None:
    promtool = tool("promtool", "prometheus")
    checked = run(promtool, "check", "rules", RULES)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run(promtool, "test", "rules", RULE_TESTS)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout

    # The unit tests can fail: the write-stall alert without its allowance for outcomes on
    # their way (any unwritten outcome for 2 minutes) fires on the busy, healthy relay.
    shutil.copy(RULE_TESTS, tmp_path)
    (tmp_path / RULES.name).write_text(RULES.read_text().replace("5 * sum", "0 * sum"))
    broken = run(promtool, "test", "rules", tmp_path / RULE_TESTS.name)
    assert broken.returncode != 0
    assert "OutboxUnwrittenOutcomes" in broken.stdout + broken.stderr


def test_the_dashboard_queries_are_promql_promtool_accepts(tmp_path: Path) -> None:
    promtool = tool("promtool", "prometheus")
    # Grafana's variables, as Grafana substitutes them, then each query as a recording rule.
    rules = ["groups:", "  - name: dashboard", "    rules:"]
    for n, expr in enumerate(dashboard_expressions()):
        query = expr.replace("$__rate_interval", "1m").replace("$instance", ".*")
        rules += [f"      - record: dashboard:query{n}", f"        expr: {json.dumps(query)}"]
    (tmp_path / "dashboard.yaml").write_text("\n".join(rules) + "\n")
    checked = run(promtool, "check", "rules", tmp_path / "dashboard.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_metric_names_are_read_from_promql() -> None:
    assert metric_names(
        'sum by (outcome) (rate(outbox_relay_messages_total{job="x", outcome=~"a|b"}[5m]))'
    ) == {"outbox_relay_messages_total"}
    assert metric_names(
        "min_over_time(a_b[2m]) > on (job, instance) 5 * sum by (job) (rate(c[2m]))"
    ) == {"a_b", "c"}
    assert metric_names('absent(up{job="outbox-relay"} == 1)') == {"up"}


# --- the health check ------------------------------------------------------------------------


class _Unhealthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"database unreachable: connection refused\nsecond line\n"
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_the_health_check_says_why_in_one_line() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unhealthy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/healthz"
        answered = run(sys.executable, HEALTHCHECK, "--tries", "2", "--interval", "0", url)
    finally:
        server.shutdown()
        server.server_close()
    assert answered.returncode == 1
    assert answered.stderr == f"unhealthy: {url} answered 503: database unreachable: " + (
        "connection refused\n"
    )

    closed = f"http://127.0.0.1:{free_port()}/healthz"
    refused = run(sys.executable, HEALTHCHECK, "--timeout", "2", closed)
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"unhealthy: {closed} does not answer: ")
    assert refused.stderr.count("\n") == 1

    bad = run(sys.executable, HEALTHCHECK, "localhost:9464")
    assert bad.returncode == 2
    assert "not an http(s) URL" in bad.stderr


# --- the container -------------------------------------------------------------------------


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's instructions (continuation lines joined), by stage."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Dockerfile").read_text())
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            word, _, rest = line.strip().partition(" ")
            if word == "FROM":
                stages.append([])
            if stages:
                stages[-1].append((word, rest.strip()))
    return stages


def test_the_image_builds_a_wheel_and_runs_as_a_user_with_a_health_check() -> None:
    build, install, runtime = dockerfile_stages()
    assert build[0] == ("FROM", "${PYTHON_IMAGE} AS build")
    assert any(w == "RUN" and "pip wheel" in r for w, r in build)
    # Every folder the wheel is built from is copied into the build stage: a package added to
    # pyproject.toml without a COPY would be missing from the image.
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir: dict[str, str] = setuptools["package-dir"]
    tops = {p for p in setuptools["packages"] if "." not in p and p not in package_dir}
    folders = tops | {folder.split("/")[0] for folder in package_dir.values()}
    copied = {r.split()[0] for w, r in build if w == "COPY"}
    assert folders <= copied, f"not copied into the build stage: {folders - copied}"
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert all(f"!{folder}" in ignore for folder in folders)

    # The wheels are installed offline; the runtime stage takes the installed virtualenv only
    # (no wheels, no source), runs as a user and checks /healthz.
    assert ("COPY", "--from=build /wheels /wheels") in install
    assert any(w == "RUN" and "--no-index --find-links /wheels" in r for w, r in install)
    copies = [r for w, r in runtime if w == "COPY"]
    assert copies == [
        "--from=install /opt/outbox /opt/outbox",
        "deploy/healthcheck.py /usr/local/bin/outbox-healthcheck",
    ]
    assert HEALTHCHECK.stat().st_mode & 0o111, "the image runs healthcheck.py as a program"
    users = [r for w, r in runtime if w == "USER"]
    assert users and users[-1].split(":")[0] not in {"0", "root"}
    (check,) = [r for w, r in runtime if w == "HEALTHCHECK"]
    assert "/healthz" in check and "outbox-healthcheck" in check
    env = " ".join(r for w, r in runtime if w == "ENV")
    assert "TELEGRAM_BOT_TOKEN_FILE=/run/secrets/" in env
    assert "TELEGRAM_BOT_TOKEN=" not in env


def compose_tool() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") is None or run("docker", "compose", "version").returncode != 0:
        missing_tool("docker-compose is missing (apt-get install docker-compose)")
    return ["docker", "compose"]


def test_docker_compose_accepts_the_compose_file(tmp_path: Path) -> None:
    compose = compose_tool()
    for profile in ([], ["--profile", "bot"]):
        checked = run(*compose, "-f", DEPLOY / "compose.yaml", *profile, "config", "-q")
        assert checked.returncode == 0, checked.stderr
    text = (DEPLOY / "compose.yaml").read_text()
    assert "TELEGRAM_BOT_TOKEN:" not in text and "POSTGRES_PASSWORD:" not in text

    # The check can fail: a misspelt key is refused.
    broken = tmp_path / "compose.yaml"
    broken.write_text(text.replace("restart: unless-stopped", "restarts: unless-stopped", 1))
    refused = run(*compose, "-f", broken, "config", "-q")
    assert refused.returncode != 0
    assert "restarts" in refused.stderr


def test_the_image_builds_where_docker_can_build() -> None:
    if shutil.which("docker") is None or run("docker", "info").returncode != 0:
        pytest.skip("no Docker daemon here: the image is not built (its recipe is checked above)")
    built = run("docker", "build", "-f", DEPLOY / "Dockerfile", "-t", "outbox-telegram:test", ROOT)
    if built.returncode != 0 and "pull" in built.stderr.lower():
        pytest.skip(f"the base image cannot be pulled here: {built.stderr.strip()[-300:]}")
    assert built.returncode == 0, built.stderr[-3000:]
    version = run("docker", "run", "--rm", "outbox-telegram:test", "--help")
    assert version.returncode == 0, version.stderr
