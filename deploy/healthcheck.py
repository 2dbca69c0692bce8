#!/usr/bin/env python3
"""Exit 0 when a URL answers 200 (a relay's /healthz), else print one line and exit 1.

The container's HEALTHCHECK and the systemd health timer run it. Standard library only, so it
runs on the image's or the virtualenv's Python with nothing else installed. The reason the
endpoint gives (a 503's body) is printed, cut to its first line.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request


def check(url: str, timeout: float) -> str | None:
    """None when ``url`` answers 200, else why not, in one line."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310 (http only)
            if answer.status == 200:
                return None
            return f"{url} answered {answer.status}"
    except urllib.error.HTTPError as err:
        reason = err.read(200).decode("utf-8", "replace").strip().splitlines()
        return f"{url} answered {err.code}" + (f": {reason[0]}" if reason else "")
    except (urllib.error.URLError, OSError) as err:
        cause = getattr(err, "reason", err)
        return f"{url} does not answer: {cause}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default="http://127.0.0.1:9464/healthz")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per try (5)")
    parser.add_argument(
        "--tries", type=int, default=1, help="unhealthy only when this many tries in a row fail"
    )
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between tries (5)")
    args = parser.parse_args(argv)
    if not args.url.startswith(("http://", "https://")):
        parser.error(f"not an http(s) URL: {args.url!r}")
    problem = None
    for attempt in range(max(args.tries, 1)):
        if attempt:
            time.sleep(args.interval)
        problem = check(args.url, args.timeout)
        if problem is None:
            return 0
    print(f"unhealthy: {problem}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
