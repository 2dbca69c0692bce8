"""Tools for testing an app that uses the outbox, shipped in the same wheel but apart from the
runtime package: nothing under ``outbox`` imports them, so a production relay never loads them.

- ``outbox_testing.fake_telegram``: a local fake of the Telegram Bot API over real HTTP
  (``outbox fake-telegram``), on aiohttp's server (aiohttp is in the core).
"""
