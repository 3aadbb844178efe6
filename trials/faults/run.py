"""One fault from start to verdict: the service started, the load and the probes begun, a
healthy stretch, the fault staged and held, undone (by the operator's restart if it needs
one), the load carried on, then everything stopped and the acknowledged writes checked.

Each backend's runner (``sqlite_faults``, ``pg_faults``, ``port_fault``) prepares the
environment and hands a ``Run`` to the fault's staging function; whatever goes wrong is
recorded as the result's ``error`` and the environment is undone all the same."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from .config import FaultConfig
from .load import Load, Prober, listed_ids
from .server import Server, ServerError
from .verdict import FaultResult


class Run:
    def __init__(self, name: str, backend: str, config: FaultConfig, server: Server) -> None:
        self.config = config
        self.server = server
        self.result = FaultResult(name=name, backend=backend)
        self.load: Load | None = None
        self.probes: list[Prober] = []
        self._log_from = 0
        self.old_ids: set[int] | None = None  # what the file swapped away held
        self.problems: list[str] = []  # why some check could not be made

    def say(self, text: str) -> None:
        self.config.progress(f"{self.result.name}: {text}")

    def begin(self) -> None:
        """Wait for /readyz 200, then start the load and the probes; a healthy stretch."""
        self.await_ready(timeout=20)
        if not self.server.token:
            raise RuntimeError("the server printed no token on its first start")
        self.result.origin = time.monotonic()
        self.load = Load(self.server.base_url, self.server.token, self.config.clients)
        self.probes = [
            Prober(self.server.base_url, "/readyz", self.config.answer_bound),
            Prober(self.server.base_url, "/healthz", self.config.answer_bound),
        ]
        for probe in self.probes:
            probe.start()
        self.load.start()
        time.sleep(self.config.warmup)

    def await_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.server.base_url, timeout=2) as http:
            while True:
                try:
                    if http.get("/readyz").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"/readyz never answered 200 within {timeout:g} s")
                time.sleep(0.1)

    def mark_start(self, evidence: str = "") -> None:
        self.result.start = time.monotonic()
        self._log_from = self.server.log_size()
        if evidence:
            self.result.evidence.append(evidence)
        self.say(f"fault in place {evidence}".rstrip())

    def mark_end(self, moment: float | None = None) -> None:
        """The fault is undone; log lines are counted up to now (or to the operator)."""
        self.result.end = moment if moment is not None else time.monotonic()
        if self.result.log_lines is None:
            self.result.log_lines = self.server.log_lines(self._log_from, self.server.log_size())
        self.say("fault undone")

    def evidence(self, text: str) -> None:
        self.result.evidence.append(text)

    def hold(self, seconds: float) -> None:
        time.sleep(seconds)

    def operator_restart(
        self, between: Callable[[], None], if_refused: Callable[[], None] | None = None
    ) -> None:
        """The operator's way out: stop the service (the load held meanwhile), do
        ``between`` (fsck, mount...), start it again on the same address; the fault's end is
        when it serves again. If the service refuses that start and ``if_refused`` is given,
        the refusal is noted, ``if_refused`` done (what the refusal asks of the operator) and
        the service started once more. A fresh database prints a new token: the load takes
        it."""
        assert self.load is not None
        self.load.pause()
        self.result.operator = time.monotonic()
        self.result.log_lines = self.server.log_lines(self._log_from, self.server.log_size())
        self.say("operator stops the service")
        self.server.stop()
        between()
        previous = self.server.token
        try:
            ready = self.server.start()
        except ServerError as exc:
            if if_refused is None:
                raise
            said = [line for line in str(exc).splitlines() if "Error:" in line]
            refusal = (said or [str(exc)])[0].split("Error:", 1)[-1].strip()
            self.result.notes.append(f"a bare restart was refused: {refusal}")
            if_refused()
            ready = self.server.start()
        if self.server.token != previous:
            self.result.notes.append("the restarted service printed a new token (a new database)")
            self.load.token = self.server.token
        self.mark_end(ready)
        self.load.resume()

    def finish(self) -> None:
        """The load after the fault, then everything stopped and collected."""
        if self.result.end is not None:
            time.sleep(self.config.after)
        self.stop_load()

    def stop_load(self) -> None:
        if self.load is not None:
            self.load.stop()
            self.result.answers = list(self.load.answers)
            self.load = None
        for probe in self.probes:
            probe.stop()
        if self.probes:
            self.result.readyz = list(self.probes[0].probes)
            self.result.healthz = list(self.probes[1].probes)
            self.probes = []

    def acknowledged(self, sent_from: float = 0.0, sent_before: float = float("inf")) -> set[int]:
        return {
            a.plant_id
            for a in self.result.answers
            if a.status == 200 and sent_from <= a.sent < sent_before
        }

    def list_plants(self) -> set[int] | None:
        """Every plant id the service lists now, or None (noted) if it cannot list them."""
        try:
            return listed_ids(self.server.base_url, self.server.token)
        except RuntimeError as exc:
            self.problems.append(f"the service could not list ({exc})")
            return None

    def judge_lost(
        self,
        listed: set[int] | None,
        stored: set[int] | None = None,
        sent_from: float = 0.0,
        counted: tuple[int, list[str]] = (0, []),
    ) -> None:
        """The creates acknowledged (sent since ``sent_from``) must be listed by the service
        and, with it stopped, be in the file at the configured path (``stored``; None for
        PostgreSQL or an unreadable file). ``counted``: losses judged otherwise, and why."""
        acknowledged = self.acknowledged(sent_from)
        lost, details = counted[0], list(counted[1])
        if listed is None and stored is None:
            self.result.lost = None
            self.result.lost_detail = "; ".join([*details, *self.problems, "nothing to check"])
            return
        not_listed = acknowledged - listed if listed is not None else set()
        not_stored = acknowledged - stored if stored is not None else set()
        if not_listed:
            details.append(f"{len(not_listed)} not listed (ids {sorted(not_listed)[:10]})")
        if not_stored:
            details.append(f"{len(not_stored)} not in the file (ids {sorted(not_stored)[:10]})")
        self.result.lost = lost + len(not_listed | not_stored)
        self.result.lost_detail = "; ".join([*details, *self.problems])

    def fail(self, exc: BaseException) -> None:
        message = f"{type(exc).__name__}: {exc}"
        self.result.error = self.result.error or message
        self.say(f"error: {message}")
