"""The faults by name: each run through its backend's runner, then judged. A ``Suite`` keeps
the one PostgreSQL cluster its PostgreSQL faults share (made when the first needs it) and
removes it at the end."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType

from .config import FAULTS, POSTGRES_FAULTS, SQLITE_FAULTS, FaultConfig, StagingError
from .pg_faults import run_pg_fault
from .port_fault import run_second_serve
from .postgres import Cluster
from .sqlite_faults import run_sqlite_fault
from .verdict import FaultResult, Measures, Target, measure, targets


@dataclass
class Verdict:
    result: FaultResult
    measures: Measures
    targets: list[Target]

    @property
    def name(self) -> str:
        return self.result.name

    @property
    def failed(self) -> list[Target]:
        return [target for target in self.targets if target.passed is False]

    @property
    def passed(self) -> bool:
        return not self.failed

    def target(self, name: str) -> Target | None:
        """The target whose name starts with ``name`` (its limits are part of the name)."""
        return next((t for t in self.targets if t.name.startswith(name)), None)

    def findings(self) -> str:
        lines = [f"{self.name}:"]
        lines += [f"  {target.line}" for target in self.targets]
        lines += [f"  note: {note}" for note in self.result.notes]
        return "\n".join(lines)


def judge(result: FaultResult, config: FaultConfig) -> Verdict:
    measures = measure(result, config.answer_bound)
    return Verdict(result, measures, targets(result, measures, config.answer_bound))


class Suite:
    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        self._cluster: Cluster | None = None
        self._cluster_error: StagingError | None = None

    def __enter__(self) -> Suite:
        self.config.workdir.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def cluster(self) -> Cluster:
        if self._cluster_error is not None:
            raise self._cluster_error
        if self._cluster is None:
            self.config.progress("postgres: initdb and start a throwaway cluster")
            try:
                cluster = Cluster()
            except StagingError as exc:
                self._cluster_error = exc
                raise
            self._cluster = cluster
            try:
                cluster.init()
            except StagingError as exc:
                self._cluster_error = exc
                raise
        return self._cluster

    def run(self, name: str) -> Verdict:
        if name not in FAULTS:
            raise ValueError(f"no fault {name!r}; the faults: {', '.join(FAULTS)}")
        self.config.progress(f"{name}: staging")
        if name in SQLITE_FAULTS:
            result = run_sqlite_fault(name, self.config)
        elif name in POSTGRES_FAULTS:
            result = run_pg_fault(name, self.config, self.cluster)
        else:
            result = run_second_serve(self.config)
        verdict = judge(result, self.config)
        failed = ", ".join(target.name for target in verdict.failed)
        self.config.progress(f"{name}: {'passed' if verdict.passed else 'FAILED ' + failed}")
        return verdict

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.remove()
            self._cluster = None
