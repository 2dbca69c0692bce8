"""Command line of the suite: which parts, how big, where the results go."""

from __future__ import annotations

import argparse
import logging
import platform
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from bench import (
    blocked,
    bots,
    broadcast,
    db_path,
    growth,
    lanes,
    latency,
    lesson,
    limits,
    migration,
    order,
    paid,
    peers,
    quiet,
    report,
    telegram_path,
)
from bench.harness import Figure, Options, PartUnavailable, Server, dump_json

Part = Callable[[Server, Options], list[Figure]]

# In the order the issue lists them; ``peers`` runs only with --peers or --only peers.
PARTS: dict[str, tuple[Part, str]] = {
    "lesson": (lesson.run, "1. the lesson's three claim modes and the relay, 8 workers, 2 ms"),
    "telegram": (telegram_path.run, "2. through python-telegram-bot, against it alone"),
    "db": (db_path.run, "3. the database path alone, no-op sender"),
    "latency": (latency.run, "4. commit-to-request latency, NOTIFY and poll-only; scheduled"),
    "growth": (growth.run, "5. claim cost beside 1M done rows; size with retention"),
    "limits": (limits.run, "6. Telegram's limits enforced by the fake Bot API, 60 s"),
    "peers": (peers.run, "7. procrastinate and PgQueuer on the workload of part 3"),
    "broadcast": (broadcast.run, "8. enqueue_many, a batch's progress and cancel, paused claims"),
    "lanes": (lanes.run, "9. lanes: a reply during a broadcast, a peak with and without windows"),
    "bots": (bots.run, "10. many bots: --tokens-dir against a relay per token; 1,000 bots"),
    "order": (order.run, "11. order per chat: 500s, 429s and a relay killed, two relays"),
    "migration": (migration.run, "12. the newest revision's lock beside 1,000,000 rows"),
    "quiet": (quiet.run, "13. quiet hours: none set, and 10,000 chats' rows held"),
    "paid": (paid.run, "14. paid broadcasts: --paid-rate-limit 400 and 1,000, 100 ms answers"),
    "blocked": (blocked.run, "15. blocked chats: 20,000 messages, 400 of 2,000 chats blocked"),
}
RESULTS_DIR = Path("bench/results")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmarks of the outbox relay; prints one markdown table.",
        epilog="parts: " + "; ".join(f"{name} ({about})" for name, (_, about) in PARTS.items()),
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--peers", action="store_true", help="add procrastinate and PgQueuer")
    parser.add_argument(
        "--only",
        type=lambda raw: [p.strip() for p in raw.split(",") if p.strip()],
        default=None,
        help="comma-separated parts to run, e.g. --only lesson,latency (aliases: claim=lesson)",
    )
    return parser


_ALIASES = {"claim": "lesson", "db-path": "db", "ptb": "telegram", "peer": "peers"}


def selected(args: argparse.Namespace) -> list[str]:
    if args.only is None:
        return [name for name in PARTS if name != "peers" or args.peers]
    names = [_ALIASES.get(name, name) for name in args.only]
    unknown = [name for name in names if name not in PARTS]
    if unknown:
        raise SystemExit(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    if args.peers and "peers" not in names:
        names.append("peers")
    return [name for name in PARTS if name in names]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    names = selected(args)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    warnings.filterwarnings("ignore", module="platformdirs")
    options = Options(quick=args.quick, peers=args.peers)
    began = time.perf_counter()
    options.say(f"parts: {', '.join(names)}{' (quick)' if args.quick else ''}")
    server = Server.start()
    figures: list[Figure] = []
    failed: list[str] = []
    try:
        for name in names:
            run, about = PARTS[name]
            options.say(f"part {about}")
            try:
                figures += run(server, options)
            except PartUnavailable as err:  # what it needs is not here: said in one line
                failed.append(f"{name}: {err}")
            except Exception as err:  # one broken part must not hide the others' results
                logging.exception("part %s failed", name)
                failed.append(f"{name}: {type(err).__name__}: {err}")
    finally:
        server.close()
    minutes = (time.perf_counter() - began) / 60
    header = (
        f"`python -m bench{' --quick' if args.quick else ''}"
        f"{' --peers' if args.peers else ''}"
        f"{' --only ' + ','.join(args.only) if args.only else ''}`, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, Python {platform.python_version()}, "
        f"{minutes:.1f} min"
    )
    print(f"\n{header}\n\n{report.table(figures)}\n")
    if args.quick:
        print("- quick run: sizes and windows too small to judge the targets; run without --quick")
    for failure in failed:
        print(f"- part failed: {failure}")
    dump_json(
        RESULTS_DIR / time.strftime("%Y%m%d-%H%M%S.json"),
        {
            "run": header,
            "figures": [asdict(f) for f in figures],
            "failed": failed,
            "progress": options.log,
        },
    )
    return 1 if failed else 0
