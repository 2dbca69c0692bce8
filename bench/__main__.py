"""``python -m bench``: run the suite and print the results table."""

from __future__ import annotations

import sys

from bench.cli import main

sys.exit(main())
