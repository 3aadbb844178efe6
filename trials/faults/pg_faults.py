"""The PostgreSQL faults, each on a fresh database of the suite's throwaway cluster: every
connection of the service ended (ten times, 0.3 s apart), ``pg_ctl restart`` in fast and in
immediate mode, and the server stopped for a few seconds, under the service and its load."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable

from .config import FaultConfig, StagingError
from .postgres import Cluster
from .run import Run
from .server import Server
from .verdict import FaultResult

KILL_ROUNDS = 10
KILL_EVERY = 0.3


def run_pg_fault(name: str, config: FaultConfig, cluster: Callable[[], Cluster]) -> FaultResult:
    """``cluster`` gives the suite's cluster (made on first use; it may fail to be made)."""
    directory = config.workdir / name
    directory.mkdir(parents=True, exist_ok=True)
    server = Server(config, "", directory / "server.log")
    run = Run(name, "postgres", config, server)
    pg: Cluster | None = None
    try:
        pg = cluster()
        server.database_url = pg.create_database()
        server.start()
        run.begin()
        STAGINGS[name](run, pg)
        run.finish()
        run.judge_lost(run.list_plants())
    except Exception as exc:
        run.fail(exc)
    finally:
        run.stop_load()
        server.stop()
        if pg is not None and not pg.running:  # leave it up for the next fault
            with contextlib.suppress(StagingError, subprocess.SubprocessError):
                pg.start()
    return run.result


def connections_ended(run: Run, pg: Cluster) -> None:
    ended: list[int] = []
    for round_ in range(KILL_ROUNDS):
        ended.append(pg.terminate_service())
        if round_ == 0:
            run.mark_start()
        if round_ < KILL_ROUNDS - 1:
            time.sleep(KILL_EVERY)
    run.mark_end()
    if not sum(ended):
        raise StagingError("pg_terminate_backend found no connection of the service to end")
    run.evidence(f"pg_terminate_backend ended {sum(ended)} connections ({ended})")


def restart(mode: str) -> Callable[[Run, Cluster], None]:
    def stage(run: Run, pg: Cluster) -> None:
        before = pg.postmaster_pid()
        run.mark_start()
        out = pg.restart(mode)
        run.mark_end()
        after = pg.postmaster_pid()
        seconds = (run.result.end or 0.0) - (run.result.start or 0.0)
        if before == after or "server started" not in out:
            raise StagingError(f"pg_ctl restart -m {mode} did not restart it: {out[-300:]}")
        run.evidence(f"pg_ctl restart -m {mode}: postmaster {before} -> {after} in {seconds:.2f} s")

    return stage


def outage(run: Run, pg: Cluster) -> None:
    run.mark_start()
    pg.stop("fast")
    time.sleep(0.3)
    if pg.ready():
        raise StagingError("pg_isready still answers after pg_ctl stop")
    run.evidence("pg_ctl stop -m fast: pg_isready gets no answer")
    run.hold(max(0.0, run.config.seconds - 0.3))
    pg.start()
    run.mark_end()
    run.evidence("pg_ctl start: accepting connections again")


STAGINGS: dict[str, Callable[[Run, Cluster], None]] = {
    "pg-connections-ended": connections_ended,
    "pg-restart-fast": restart("fast"),
    "pg-restart-immediate": restart("immediate"),
    "pg-outage": outage,
}
