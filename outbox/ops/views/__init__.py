"""How operators see the outbox, on the command line and the web page: one module per noun."""
