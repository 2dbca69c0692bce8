"""``python -m reminders``: the same as the ``reminders`` command."""

from __future__ import annotations

import sys

from reminders.cli import main

__all__: list[str] = []

sys.exit(main())
