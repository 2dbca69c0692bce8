"""The vazifalar domain's own Alembic history (``reminders migrate``)."""
