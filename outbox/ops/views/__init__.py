"""How operators see the outbox, on the command line and the web page alike: one module per
noun (message, status, bots, relays, pause, batch, maintenance), sharing ``_text``."""
