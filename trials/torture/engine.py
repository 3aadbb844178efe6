"""The torture run: tokens issued through the CLI, clients started, the server killed and
restarted ``config.kills`` times, then every user listed and every key judged (the method is
in this package's docstring)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from .client import Client, Signals
from .config import TortureConfig, TortureError, TortureResult, Value
from .judge import Key, judge_listing, list_plants, sqlite_integrity
from .victim import Victim


def issue_tokens(database_url: str, users: int, per_user: int) -> list[tuple[str, str]]:
    """``(user, token)`` pairs issued by ``plantstore token create`` as a real process.

    The first runs alone (it creates or migrates the schema); the rest two at a time.
    """
    env = {**os.environ, "PLANTSTORE_DATABASE_URL": database_url}

    def create(user: str) -> tuple[str, str]:
        done = subprocess.run(
            [sys.executable, "-m", "plantstore", "token", "create", user],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        lines = done.stdout.rstrip("\n").splitlines()
        if done.returncode != 0 or not lines or not lines[-1].startswith("pst_"):
            raise TortureError(f"token create {user} failed: {done.stdout}{done.stderr}")
        return user, lines[-1]

    names = [f"torture-{user}" for user in range(users) for _ in range(per_user)]
    first = create(names[0])
    with ThreadPoolExecutor(max_workers=2) as pool:
        return [first, *pool.map(create, names[1:])]


def run_torture(config: TortureConfig) -> TortureResult:
    """Drive the clients, kill and restart the server ``config.kills`` times, then judge."""
    started = time.monotonic()
    seed = config.seed if config.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    backend = "sqlite" if config.database_url.startswith("sqlite") else "postgres"
    result = TortureResult(backend=backend, seed=seed, workers=config.workers)
    config.workdir.mkdir(parents=True, exist_ok=True)

    tokens = issue_tokens(config.database_url, config.users, config.tokens_per_user)
    if config.progress:
        config.progress(f"{backend}: {len(tokens)} tokens for {config.users} users; seed {seed}")
    victim = Victim(config)
    signals = Signals()
    clients = []
    for index in range(config.clients):
        user, token = tokens[index % len(tokens)]
        client_rng = random.Random(rng.randrange(2**32))
        clients.append(Client(index, user, token, victim, signals, client_rng))
    try:
        victim.start()
        signals.up.set()
        for client in clients:
            client.start()
        kill_and_restart(config, result, victim, signals, clients, rng, started)
        signals.stop.set()  # the clients settle what is still uncertain, then return
        for client in clients:
            client.join(timeout=120)
            if client.error is not None:
                raise TortureError(f"{client.name} failed") from client.error
            if client.is_alive():
                raise TortureError(f"{client.name} did not finish")
        final_look(result, clients, tokens, victim.base_url)
    except BaseException:
        signals.abort.set()
        signals.up.set()
        victim.kill()
        for client in clients:
            if client.is_alive():
                client.join(timeout=60)
        raise
    victim.stop()
    if backend == "sqlite":
        result.integrity_check = sqlite_integrity(config.database_url)
    result.seconds = time.monotonic() - started
    return result


def kill_and_restart(
    config: TortureConfig,
    result: TortureResult,
    victim: Victim,
    signals: Signals,
    clients: list[Client],
    rng: random.Random,
    started: float,
) -> None:
    """Let traffic run 50-400 ms, SIGKILL, restart, wait for /healthz; ``config.kills`` times.

    With several workers, a kill now and then takes one worker instead, or the supervisor
    alone (see ``Victim``)."""
    for kill in range(1, config.kills + 1):
        time.sleep(rng.uniform(config.min_traffic, config.max_traffic))
        for client in clients:
            if client.error is not None:
                raise TortureError(f"{client.name} failed") from client.error
        worker, supervisor_alone, draw = None, False, rng.random()
        if config.workers > 1 and draw < config.worker_kill_chance:
            # The SQLite writer's owner or another worker, whichever has been killed less.
            others = result.worker_kills - result.owner_kills
            worker = victim.killable_worker(rng, owner=result.owner_kills <= others)
        elif config.workers > 1:
            supervisor_alone = draw < config.worker_kill_chance + config.supervisor_kill_chance
        if worker is not None:
            killed = time.monotonic()
            owned = worker == victim.writer_owner()
            victim.kill_worker(worker)  # the server stays up: the clients go on
            result.kills += 1
            result.worker_kills += 1
            result.owner_kills += owned
            result.respawn_seconds += time.monotonic() - killed
            report_progress(config, result, kill, started)
            continue
        signals.up.clear()
        killed = time.monotonic()
        if supervisor_alone:
            victim.kill_supervisor()
            result.supervisor_kills += 1
        else:
            victim.kill()
        result.kills += 1
        if rng.random() < config.startup_kill_chance:
            victim.spawn()
            time.sleep(rng.uniform(0.0, 1.5))
            victim.kill()
            result.startup_kills += 1
        victim.start()
        signals.up.set()
        result.restart_seconds += time.monotonic() - killed
        report_progress(config, result, kill, started)


def report_progress(
    config: TortureConfig, result: TortureResult, kill: int, started: float
) -> None:
    if config.progress and (kill % 10 == 0 or kill == config.kills):
        one = f" ({result.worker_kills} of one worker)" if result.worker_kills else ""
        config.progress(
            f"{result.backend}: {kill}/{config.kills} kills{one}, {time.monotonic() - started:.0f}s"
        )


def final_look(
    result: TortureResult, clients: list[Client], tokens: list[tuple[str, str]], base_url: str
) -> None:
    """Add up the clients, check every token still works, list every user and judge."""
    keys: dict[tuple[str, int], Key] = {}
    for client in clients:
        counts = client.result
        for name in (
            "acknowledged_creates",
            "acknowledged_deletes",
            "uncertain",
            "unavailable",
            "not_sent",
        ):
            setattr(result, name, getattr(result, name) + getattr(counts, name))
        for name in ("lost", "resurrected", "unexpected", "odd", "faults"):
            getattr(result, name).extend(getattr(counts, name))
        keys.update(((key.user, key.plant_id), key) for key in client.keys)
    result.keys = len(keys)
    listings: dict[str, list[Value]] = {}
    with httpx.Client(timeout=60) as http:
        for user, token in tokens:
            response = http.get(
                f"{base_url}/plants?limit=0", headers={"Authorization": f"Bearer {token}"}
            )
            if response.status_code != 200:
                result.odd.append(f"a token of {user!r} answered {response.status_code} at the end")
            elif user not in listings:
                listings[user], odd = list_plants(http, base_url, token)
                result.odd.extend(odd)
    judge_listing(result, keys, listings)
