"""One row per backend or harness, and what is printed at the end: each failure and crash
(inputs written compactly), the table, and the volume targets."""

from __future__ import annotations

from dataclasses import dataclass, field

REQUIRED_REQUESTS = 10_000  # per backend
REQUIRED_EXECUTIONS = 1_000_000  # in all


@dataclass
class Row:
    phase: str
    target: str
    count: int = 0
    failures: list[str] = field(default_factory=list)
    note: str = ""


def indent(text: str, prefix: str = "   ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def print_table(rows: list[Row]) -> None:
    print("\n== summary")
    header = f"{'phase':<14}{'backend/harness':<17}{'requests/execs':>16}{'failures':>10}  notes"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{row.phase:<14}{row.target:<17}{row.count:>16,}{len(row.failures):>10}  {row.note}")


def print_targets(rows: list[Row]) -> None:
    """The volume targets, met or not, as this run counted them."""
    backends = [row for row in rows if row.phase == "schemathesis"]
    harnesses = [row for row in rows if row.phase == "atheris"]
    if backends:
        volume = ", ".join(f"{row.target} {row.count:,}" for row in backends)
        met = all(row.count >= REQUIRED_REQUESTS for row in backends)
        failures = sum(len(row.failures) for row in backends)
        print(
            f"schemathesis: >= {REQUIRED_REQUESTS:,} requests per backend: "
            f"{'met' if met else 'NOT met'} ({volume}); {failures} failures"
        )
    if harnesses:
        executions = sum(row.count for row in harnesses)
        crashes = sum(len(row.failures) for row in harnesses)
        met = executions >= REQUIRED_EXECUTIONS
        print(
            f"atheris: >= {REQUIRED_EXECUTIONS:,} executions: {'met' if met else 'NOT met'} "
            f"({executions:,} over {len(harnesses)} harnesses); {crashes} crashes"
        )
