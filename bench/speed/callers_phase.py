"""Many callers, not one: list 10 with one token, then with 10,000 tokens in rotation (each its
own user with its own plants), on one server, so that every request of the second run comes
from a caller whose token the server saw about 10,000 requests (under a second) ago, in
steady state: two seconds of the rotation go first, as the one-token run has its warm-up.

The tokens are written straight into the file (users, hashed tokens, twenty plants each),
as ``plantstore token create`` would store them; their secrets go to a file that wrk's
``list_many.lua`` reads at start. The server is the main phase's, pinned the same way.

Both runs go through ``list_many.lua``, the one-token run with a file of that one token, so
that wrk does the same work for each request of either and the ratio is the server's alone
(wrk's plain requests, for the one token only, cost the client less than a script's, and a
faster client lets the server answer more requests a pass).

The two runs alternate over ``--rounds`` rounds (one token, many, one, many, ...), each round
on a fresh server of the same file, each ratio within its round, so that a drift of the
machine falls on both; the target is their median, with their range.

    .venv/bin/python -m bench.speed.callers_phase [--tokens 10000] [--seconds 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.lib.loads import sqlite_path
from bench.lib.measure import LIST_10, Load, Measurement, Options, measure, warm_up
from bench.lib.place import HERE, require_real_disk
from bench.lib.seed import prepare
from bench.lib.services import start_service
from bench.lib.wrk import run_wrk
from plantstore.auth.tokens import hash_token, new_token

from .targets import Target, floor_over_rounds

PLANTS_EACH = 20
GOAL = 0.9  # of the one-token rate


@dataclass(frozen=True)
class CallersRound:
    one: Measurement
    many: Measurement

    def ratio(self) -> float | None:
        if self.one.result is None or self.many.result is None or not self.one.result.good_rate:
            return None
        return self.many.result.good_rate / self.one.result.good_rate


@dataclass(frozen=True)
class CallersFigures:
    tokens: int
    rounds: list[CallersRound]

    def ratios(self) -> list[float]:
        return [value for value in (r.ratio() for r in self.rounds) if value is not None]

    def median_round(self) -> CallersRound | None:
        """The round whose ratio is the median (the lower middle one of an even count)."""
        measured = sorted((r for r in self.rounds if r.ratio() is not None), key=_ratio_of)
        return measured[(len(measured) - 1) // 2] if measured else None

    def target(self) -> Target:
        """The many-callers target, for the run's list of targets and its plot: the median of
        the rounds' ratios, its range, and unsettled when the range straddles the goal."""
        name, goal = f"list 10, {self.tokens:,} tokens in rotation / 1 token", f">= {GOAL}x"
        ratios, middle = self.ratios(), self.median_round()
        if not ratios or middle is None:
            rows = [row for r in self.rounds for row in (r.one, r.many)]
            why = next((row.note for row in rows if row.result is None), "")
            return Target(name, goal, why or "not run", None)
        one, many = middle.one.result, middle.many.result
        assert one is not None
        assert many is not None
        rates = f"median round {many.good_rate:,.0f} vs {one.good_rate:,.0f}/s"
        return floor_over_rounds(name, GOAL, ratios, rates)

    def summary(self) -> list[str]:
        lines = []
        for number, one_round in enumerate(self.rounds, 1):
            for label, row in (
                ("1 token", one_round.one),
                (f"{self.tokens:,} tokens", one_round.many),
            ):
                if row.result is None:
                    lines.append(f"round {number}, {label}: not run ({row.note})")
                    continue
                cpu = f"{row.cpu_us_per_request:.0f}" if row.cpu_us_per_request else "-"
                lines.append(
                    f"round {number}, list 10, {label}: {row.result.good_rate:,.0f}/s, "
                    f"p99 {row.result.p99_ms:.2f} ms, {cpu} µs server CPU a request"
                )
        target = self.target()
        if target.met is not None:
            lines.append(
                f"{self.tokens:,} tokens / 1 token: {target.measured} (target {target.goal}: {target.verdict})"
            )
        return lines


def _ratio_of(one_round: CallersRound) -> float:
    return one_round.ratio() or 0.0


def seed_callers(path: Path, tokens: int, tokens_file: Path) -> None:
    """``tokens`` users, each with one token and ``PLANTS_EACH`` plants."""
    now = time.time()
    secrets = [new_token() for _ in range(tokens)]
    with sqlite3.connect(path) as conn:
        first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM users").fetchone()[0]
        ids = range(first, first + tokens)
        conn.executemany(
            "INSERT INTO users (id, name, created_at) VALUES (?, ?, ?)",
            ((user_id, f"caller-{user_id}", now) for user_id in ids),
        )
        conn.executemany(
            "INSERT INTO tokens (user_id, token_hash, created_at, label) VALUES (?, ?, ?, ?)",
            (
                (user_id, hash_token(secret), now, "bench caller")
                for user_id, secret in zip(ids, secrets, strict=True)
            ),
        )
        conn.executemany(
            "INSERT INTO plants (user_id, id, name, tag) VALUES (?, ?, ?, ?)",
            (
                (user_id, plant_id, f"bench plant {plant_id}", "b")
                for user_id in ids
                for plant_id in range(1, PLANTS_EACH + 1)
            ),
        )
    conn.close()
    tokens_file.write_text("\n".join(secrets) + "\n")


def callers_phase(options: Options, tokens: int, rounds: int = 3) -> CallersFigures:
    """``rounds`` rounds of one token then many: each round's ratio is many over one, and the
    target takes their median and range."""
    url = f"sqlite:///{options.workdir / 'callers.db'}"
    token = prepare(url)
    tokens_file = options.workdir / "callers-tokens.txt"
    seed_callers(sqlite_path(url), tokens, tokens_file)
    with sqlite3.connect(sqlite_path(url)) as conn:  # the one-token caller's plants too
        conn.executemany(
            "INSERT INTO plants (user_id, id, name, tag) VALUES (1, ?, ?, 'b')",
            ((plant_id, f"bench plant {plant_id}") for plant_id in range(1, PLANTS_EACH + 1)),
        )
    conn.close()
    rotation = {"PLANTSTORE_BENCH_TOKENS_FILE": str(tokens_file)}
    alone = options.workdir / "callers-one-token.txt"
    alone.write_text(token + "\n")
    single = {"PLANTSTORE_BENCH_TOKENS_FILE": str(alone)}
    played = [
        _one_round(options, url, token, tokens, (single, rotation), number)
        for number in range(1, rounds + 1)
    ]
    return CallersFigures(tokens, played)


def _one_round(
    options: Options,
    url: str,
    token: str,
    tokens: int,
    files: tuple[dict[str, str], dict[str, str]],
    number: int,
) -> CallersRound:
    """One token, then many, on a server of its own: a token the server looked up is read
    again after ``CACHE_AGE_SECONDS`` (30 s), and a round ends before any does. ``files``
    names the one-token file, then the many tokens', for ``list_many.lua``."""
    single, rotation = files
    server = start_service(options, f"callers-{number}", url, token)
    try:
        warm_up(server, options)
        one_load = Load(path=LIST_10, script="list_many.lua", env=single)
        one = measure(server, one_load, options, f"callers_1_r{number}", "list 10, 1 token")
        # A service with many callers has seen each of them lately: two seconds of the
        # rotation first (every token once or more), as the one-token run had its warm-up.
        run_wrk(
            server.base_url + LIST_10,
            token,
            2,
            options.connections,
            options.wrk_cpus,
            "list_many.lua",
            rotation,
        )
        many_load = Load(path=LIST_10, script="list_many.lua", env=rotation)
        label = f"list 10, {tokens:,} tokens"
        many = measure(server, many_load, options, f"callers_many_r{number}", label)
    finally:
        server.stop()
    return CallersRound(one, many)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.speed.callers_phase", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--tokens", type=int, default=10_000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results = HERE / "results"
    require_real_disk(results)
    with tempfile.TemporaryDirectory(dir=results, prefix=".callers-") as directory:
        options = Options(args.seconds, 32, "0", "1", Path(directory))
        figures = callers_phase(options, args.tokens, args.rounds)
    print("\n".join(figures.summary()))


if __name__ == "__main__":
    main()
