"""The JWT phase: list 10 with a JWT from an identity provider beside list 10 with a pst_ token.

One server, pinned like the main phase, on a fresh SQLite file, with a provider made here: an
RSA key, its JWKS in a file the server reads through a ``file:`` URL, and one RS256 access
token valid for an hour. Each caller (the pst_ token's user and the JWT's own user) holds the
same 20 plants, created through the API. Then list 10 with the pst_ token, with the JWT, and
with the pst_ token again, in rounds (pst_, JWT, pst_, JWT, ..., pst_): each JWT run is held
against the mean of the two pst_ runs around it, so a drift of the machine bends neither side,
and the target is the rounds' median with their range. The JWT is verified once; every later
request is a cache hit keyed by the header's SHA-256, which is what this measures.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from pathlib import Path

from joserfc import jwt
from joserfc.jwk import RSAKey

from bench.lib.measure import Load, Measurement, Options, measure, not_run, warm_up
from bench.lib.seed import prepare
from bench.lib.services import start_service

from .peer_phase import seed_over_http
from .targets import Target, by_round, floor_over_rounds

ISSUER = "https://id.bench.test"
AUDIENCE = "https://plantstore.bench.test"
RATIO = 0.9  # the target: a warm JWT request at least 0.9x a warm pst_ request
ROWS = (
    ("jwt_pst_before", "list 10, pst_ token, JWT phase"),
    ("jwt_list10", "list 10, JWT (RS256)"),
    ("jwt_pst_after", "list 10, pst_ token again"),
)
FAILURES = (RuntimeError, OSError, subprocess.CalledProcessError)


def provider(directory: Path) -> tuple[str, str]:
    """A JWKS file of one fresh RSA key, and an access token it signed: (JWKS URL, token)."""
    key = RSAKey.generate_key(2048, parameters={"kid": "bench-1", "use": "sig"})
    jwks = directory / "jwks.json"
    jwks.write_text(json.dumps({"keys": [key.as_dict(private=False)]}))
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "bench-jwt", "iat": now, "exp": now + 3600}
    token = jwt.encode({"alg": "RS256", "kid": key.kid, "typ": "at+jwt"}, claims, key)
    return f"file://{jwks}", token


def round_rows(rounds: int) -> list[tuple[str, str]]:
    """(key, label) of each run in order: ROWS for round 1, then a JWT and a pst_ run for
    each further round, keyed ``_r2``, ``_r3``..."""
    more = [
        (f"{key}_r{number}", f"{label}, round {number}")
        for number in range(2, rounds + 1)
        for key, label in ROWS[1:]
    ]
    return [*ROWS, *more]


def jwt_rows(options: Options, rounds: int = 1) -> list[Measurement]:
    """pst_, then JWT and pst_ again ``rounds`` times, on one server; rows kept as not run if
    the server fails."""
    url = f"sqlite:///{options.workdir / 'jwt.db'}"
    try:
        pst_token = prepare(url)
        jwks_url, jwt_token = provider(options.workdir)
        server = start_service(
            options,
            "jwt",
            url,
            pst_token,
            PLANTSTORE_JWT_JWKS_URL=jwks_url,
            PLANTSTORE_JWT_ISSUER=ISSUER,
            PLANTSTORE_JWT_AUDIENCE=AUDIENCE,
        )
        try:
            with_jwt = dataclasses.replace(server, token=jwt_token)
            seed_over_http(server)
            seed_over_http(with_jwt)  # the JWT's user is another user: its own 20 plants
            warm_up(server, options)
            warm_up(with_jwt, options)
            runs = round_rows(rounds)
            callers = [server if index % 2 == 0 else with_jwt for index in range(len(runs))]
            return [
                _noted(measure(caller, Load(), options, key, label))
                for caller, (key, label) in zip(callers, runs, strict=True)
            ]
        finally:
            server.stop()
    except FAILURES as exc:
        why = (str(getattr(exc, "stderr", None) or exc).strip().splitlines() or ["failed"])[-1]
        print(f"    JWT phase failed: {why[:300]}", flush=True)
        return not_run_rows(why[:300])


def _noted(row: Measurement) -> Measurement:
    row.note = "1 process, 20 plants per caller"
    return row


def not_run_rows(why: str) -> list[Measurement]:
    return [not_run(key, label, why) for key, label in ROWS]


def jwt_target(rows: dict[str, Measurement]) -> Target:
    """Each round's list 10 with a JWT against the mean of the pst_ runs on either side of
    it; the rounds' median, with their range, against the floor."""
    name, goal = "list 10 with a JWT vs a pst_ token", f">= {RATIO}x"
    count = len(by_round(rows, ROWS[1][0]))
    needed = [rows.get(key) for key, _ in round_rows(count)]  # in run order: pst_, JWT, pst_...
    missing = [row for row in needed if row is None or row.result is None]
    if missing:
        return Target(name, goal, next((r.note for r in missing if r is not None), "not run"), None)
    rates = [_rate(row) for row in needed]
    around = [(rates[at - 1], rates[at], rates[at + 1]) for at in range(1, len(rates), 2)]
    ratios = [
        jwt / ((before + after) / 2) if before + after else 0.0 for before, jwt, after in around
    ]
    before, with_jwt, after = around[sorted(range(count), key=ratios.__getitem__)[(count - 1) // 2]]
    figures = f"{with_jwt:,.0f} vs {before:,.0f} / {after:,.0f} req/s"
    return floor_over_rounds(name, RATIO, ratios, f"median round {figures}")


def _rate(row: Measurement | None) -> float:
    return row.result.good_rate if row is not None and row.result is not None else 0.0
