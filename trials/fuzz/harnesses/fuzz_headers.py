"""Fuzz header parsing: ``bearer_token`` (with ``hash_token``) and ``_declared_body_length``.

The input is a header block: ``name: value`` lines split on ``\\n``, names lowercased as
ASGI delivers them. The first ``authorization`` line (if any) goes to ``bearer_token``, which
may raise only its two 401s: ``Unauthenticated`` with no header or another scheme,
``InvalidToken`` for a Bearer credential of the wrong shape, and neither message echoing
the credential. A token it returns has our shape and hashes without error. The whole block
goes to ``_declared_body_length``, which must never raise: 0 without a body, the
Content-Length when it is one, None when chunked or unclear.

    .venv/bin/python -m trials.fuzz.harnesses.fuzz_headers -runs=100000
"""

from __future__ import annotations

import re

from .fuzzlib import fuzz, instrumented_imports

with instrumented_imports():
    from plantstore.auth.tokens import bearer_token, hash_token
    from plantstore.errors import InvalidToken, Unauthenticated
    from plantstore.http.keepalive import _declared_body_length

_TOKEN = re.compile(r"pst_[A-Za-z0-9_-]{43}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def header_block(data: bytes) -> list[tuple[bytes, bytes]]:
    headers = []
    for line in data.split(b"\n"):
        name, _, value = line.partition(b":")
        headers.append((name.strip().lower(), value.strip(b" \t")))
    return headers


BEYOND_EVERY_LIMIT = 2**64  # above any body size the service could be set to accept


def expected_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    if any(name == b"transfer-encoding" for name, _ in headers):
        return None
    lengths = [value for name, value in headers if name == b"content-length"]
    if not lengths:
        return 0
    last = lengths[-1]
    return int(last.lstrip(b"0") or b"0") if re.fullmatch(rb"[0-9]+", last) else None


def check_bearer(authorization: str | None) -> None:
    try:
        token = bearer_token(authorization)
    except (InvalidToken, Unauthenticated) as exc:
        refusal: InvalidToken | Unauthenticated = exc
    else:
        assert authorization is not None, token
        assert _TOKEN.fullmatch(token), (authorization, token)
        assert authorization.lower().startswith("bearer "), authorization
        assert authorization.endswith(token), authorization
        assert _SHA256.fullmatch(hash_token(token)), token
        return
    assert refusal.status == 401, refusal
    assert "pst_" not in refusal.message, refusal.message  # never echo a credential
    challenge = refusal.headers["WWW-Authenticate"]
    scheme, _, credentials = (authorization or "").partition(" ")
    if isinstance(refusal, InvalidToken):
        assert scheme.lower() == "bearer", authorization
        assert not _TOKEN.fullmatch(credentials.lstrip(" ")), authorization
        assert challenge == 'Bearer realm="plantstore", error="invalid_token"', challenge
    else:
        assert authorization is None or scheme.lower() != "bearer", authorization
        assert challenge == 'Bearer realm="plantstore"', challenge


def test_one_input(data: bytes) -> None:
    headers = header_block(data)
    authorization = next((v for n, v in headers if n == b"authorization"), None)
    check_bearer(None if authorization is None else authorization.decode("latin-1"))
    declared = _declared_body_length({"type": "http", "headers": headers})
    expected = expected_length(headers)
    if expected is not None and expected > BEYOND_EVERY_LIMIT:
        # Past 20 digits the exact value no longer matters, only that it is over every limit.
        assert declared is not None, headers
        assert declared > BEYOND_EVERY_LIMIT, (declared, headers)
    else:
        assert declared == expected, (declared, headers)


SEEDS = [
    b"authorization: Bearer pst_" + b"A" * 43,
    b"authorization: bearer    pst_" + b"-_" * 21 + b"z",
    b"authorization: Bearer pst_" + b"A" * 42,
    b"authorization: Basic dXNlcjpwYXNz",
    b"authorization: Bearer",
    b"authorization: Bearer\tpst_" + b"A" * 43,
    b"authorization:\ncontent-length: 10",
    b"content-length: 0\ncontent-length: 65536",
    b"content-length: 00000000000000000000000012",
    b"content-length: -1",
    b"content-length: \xd9\xa1",
    b"content-length: 5\ntransfer-encoding: chunked",
    # Python's int() refuses strings over 4,300 digits (CVE-2020-10735): numbers at the limit.
    b"content-length: " + b"0" * 4299 + b"5",
    b"host: example\nauthorization: Bearer pst_" + b"9" * 43 + b"\ncontent-length: 42",
]

if __name__ == "__main__":
    fuzz(test_one_input, SEEDS, max_len=8192)
