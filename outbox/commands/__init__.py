"""The ``outbox`` commands by job: ``relay``; the operator's ``list``, ``show``, ``replay`` and
``status`` (``operator``); ``migrate``, ``reap`` and ``prune`` (``maintenance``); the ``web``
page; the ``fake_telegram`` Bot API. ``options`` holds the argument machinery they share (one
environment-twin helper, one family of converters) and ``common`` the database and printing;
``outbox.cli`` is the entry point that assembles them."""
