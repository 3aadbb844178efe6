"""Who is calling: operator-issued ``pst_`` tokens (stored only as hashes), users in their
namespaces, JWTs from the team's identity provider (``jwt/``), the bearer check every
protected route runs (``bearer.Authenticator``), and the ``token`` and ``user`` commands."""
