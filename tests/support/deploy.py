"""The deployment files of deploy/, and the metric names their PromQL expressions read."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.support import ROOT

__all__ = [
    "DASHBOARD",
    "DEPLOY",
    "HEALTHCHECK",
    "RULES",
    "dashboard_expressions",
    "metric_names",
    "run",
]


DEPLOY = ROOT / "deploy"


RULES = DEPLOY / "prometheus" / "outbox-alerts.yaml"


DASHBOARD = DEPLOY / "grafana" / "outbox-relays.json"


HEALTHCHECK = DEPLOY / "healthcheck.py"


def run(*argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs
    return exprs


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: names outside braces and strings that are
    not functions, keywords or numbers."""
    bare = re.sub(r'"[^"]*"', "", expr)
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", bare)
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
    words = [
        m.group()
        for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", bare)
        if not bare[m.end() :].lstrip().startswith("(")  # a function's name
    ]
    keywords = {"and", "or", "unless", "by", "without", "on", "ignoring", "bool", "offset"}
    return {w for w in words if w not in keywords and not re.fullmatch(r"\d+[smhdwy]", w)}
