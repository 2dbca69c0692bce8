"""``python -m outbox``: the same as the ``outbox`` command."""

from __future__ import annotations

import sys

from outbox.cli import main

__all__: list[str] = []

sys.exit(main())
