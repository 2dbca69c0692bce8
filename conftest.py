"""The test suites of the repository (``tests/`` for the outbox, ``reminders/tests/`` for the
vazifalar domain) share one set of fixtures and the tiers, both plugins in ``tests/support``."""

pytest_plugins = ["pytester", "tests.support.fixtures", "tests.support.tiers"]
