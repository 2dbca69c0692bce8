"""The results table: one markdown table with absolute figures, ratios and targets."""

from __future__ import annotations

from collections.abc import Sequence

from bench.harness import Figure


def _number(value: float, unit: str) -> str:
    if unit in {"ms", "%"}:
        text = f"{value:.2f}" if value < 10 else f"{value:,.1f}"
    elif unit == "MiB":
        text = f"{value:,.1f}"
    else:
        text = f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"
    return f"{text} {unit}"


def _verdict(figure: Figure) -> str:
    if figure.met is None:
        return ""
    return "met" if figure.met else "**not met**"


def table(figures: Sequence[Figure]) -> str:
    lines = [
        "| part | figure | value | ratio | target | | notes |",
        "|---|---|--:|---|---|---|---|",
    ]
    for f in figures:
        ratio = f"{f.ratio:.2f}x {f.baseline}" if f.ratio is not None else ""
        cells = [f.part, f.name, _number(f.value, f.unit), ratio, f.target, _verdict(f), f.note]
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    return "\n".join(lines)
