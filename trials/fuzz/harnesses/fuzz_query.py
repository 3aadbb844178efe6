"""Fuzz the list query: ``query_params``, ``single_param``, ``parse_limit`` and the cursor.

The input is a raw query string, exactly as the ASGI scope carries it. The only exception
allowed anywhere is the 400 (``BadRequest``). ``limit`` must come back as ``min(limit, cap)``
for a plain decimal within int32, and a cursor is accepted only if this service issued it
to this user (checked against a fresh encoding, up to base64's two alphabets).

    .venv/bin/python -m trials.fuzz.harnesses.fuzz_query -runs=100000
"""

from __future__ import annotations

from .fuzzlib import fuzz, instrumented_imports

with instrumented_imports():
    from plantstore.errors import BadRequest
    from plantstore.http.parsing import parse_limit, query_params, single_param
    from plantstore.plants.cursors import CursorCodec

PAGE_CAP = 1000
INT32_MAX = 2**31 - 1
KEY = b"fuzzing-cursor-key-0123456789abc"
USER = 7
CODEC = CursorCodec(KEY)


def expected_limit(raw: str) -> int | None:
    """The contract: digits only (no sign, no spaces), at most int32; None if refused."""
    if not raw or not all("0" <= char <= "9" for char in raw):
        return None
    digits = raw.lstrip("0") or "0"
    if len(digits) > 10 or int(digits) > INT32_MAX:
        return None
    return min(int(digits), PAGE_CAP)


def test_one_input(data: bytes) -> None:
    query = query_params(data)
    assert all(isinstance(v, str) for values in query.values() for v in values), query
    for name in ("limit", "cursor"):
        try:
            single_param(query, name)
        except BadRequest:
            assert len(query.get(name, [])) > 1, query
        else:
            assert len(query.get(name, [])) <= 1, query
    raw_limit = query.get("limit", [None])[0]
    try:
        limit = parse_limit(raw_limit, PAGE_CAP)
    except BadRequest as exc:
        check_refusal(exc, "limit")
        assert raw_limit is not None, raw_limit
        assert expected_limit(raw_limit) is None, f"refused limit={raw_limit!r}"
    else:
        assert 0 <= limit <= PAGE_CAP, limit
        assert limit == (PAGE_CAP if raw_limit is None else expected_limit(raw_limit)), raw_limit
    for cursor in query.get("cursor", []):
        try:
            last_id = CODEC.decode(USER, cursor)
        except BadRequest as exc:
            check_refusal(exc, "cursor")
            continue
        assert -(2**63) <= last_id < 2**63, last_id
        issued = CODEC.encode(USER, last_id)
        assert cursor == issued, f"accepted {cursor!r}, issued {issued!r}"


def check_refusal(refusal: BadRequest, parameter: str) -> None:
    assert refusal.status == 400, refusal
    assert f"'{parameter}'" in refusal.message, refusal


SEEDS = [
    b"",
    b"limit=10",
    b"limit=0&cursor=" + CODEC.encode(USER, 42).encode(),
    b"cursor=" + CODEC.encode(USER, -(2**63)).encode(),
    b"cursor=" + CODEC.encode(USER + 1, 5).encode(),
    b"limit=2147483647",
    b"limit=2147483648",
    b"limit=00000000000000000001",
    b"limit=1&limit=2",
    b"limit=%31%30&cursor=a+b",
    b"limit=-1",
    b"limit=%EF%BC%91",
    b"&&=&limit",
    # Python's int() refuses strings over 4,300 digits (CVE-2020-10735): numbers at the limit.
    b"limit=" + b"0" * 4299 + b"1",
]

if __name__ == "__main__":
    fuzz(test_one_input, SEEDS, max_len=8192)
