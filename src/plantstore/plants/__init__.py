"""The plant collection: each user's plants, created idempotently, listed a keyset page at a
time, deleted by id. Data flows one way: ``routes`` (HTTP) → ``rules`` → ``store`` (the
protocol, with ``sqlite`` and ``postgres`` behind it)."""
