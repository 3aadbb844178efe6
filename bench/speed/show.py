"""What ``python -m bench.speed`` prints at the end: the tables, the targets and where the
time goes; kept apart from the phases so a report can change without touching a measurement."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.lib import report
from bench.lib.measure import Measurement

from . import layers, peer_report, sandbox_report, targets, workers_report
from .jwt_phase import jwt_target
from .run import Phases


def show(phases: Phases, args: argparse.Namespace) -> list[targets.Target]:
    """Print the tables and the targets; return the targets for the JSON record."""
    rows, peers, workers = phases.rows, phases.peers, phases.workers
    by_key = {row.key: row for row in rows}
    top = report.ceiling(by_key)
    before, after = (by_key[k].result for k in ("ref_before", "ref_after"))
    pin = (
        "unpinned"
        if args.no_pin
        else f"server on CPU {args.server_cpus}, wrk on CPU {args.wrk_cpus}"
    )
    print()
    print(
        f"{args.connections} connections, 1 wrk thread, {args.seconds}s per scenario; SQLite rows: "
        f"{pin}; every create/delete is durable (fsynced) before its answer"
    )
    if before and after and top:
        print(
            f"reference ceiling: {top:,.0f} req/s (before {before.rate:,.0f}, "
            f"after {after.rate:,.0f}); '% ref' is req/s over it"
        )
    print(report.table(rows, top))
    print(
        "other%: the server's core busy with anything but the server (other processes, "
        "interrupts, hypervisor steal)"
    )
    shares = [row.other_cpu_share for row in rows if row.other_cpu_share is not None]
    if shares and max(shares) > 0.1:
        print(f"warning: up to {100 * max(shares):.0f}% of the server's core went elsewhere")
    print("webhooks (bench/speed/webhooks_phase.py):")
    print("\n".join(f"  {line}" for line in phases.webhooks))
    print("many callers (bench/speed/callers_phase.py):")
    print("\n".join(f"  {line}" for line in phases.callers))
    print("db copy (bench/speed/copy_phase.py):")
    print("\n".join(f"  {line}" for line in phases.copy))
    print()
    print(peer_report.table(peers, top, pin))
    print()
    print(workers_report.table(workers))
    print()
    print(workers_report.ceiling_table(workers))
    print()
    print(sandbox_report.table(phases.sandbox))
    ours = [row for peer in peers if peer.name == "plantstore" for row in peer.rows.values()]
    ours += workers_report.plantstore_rows(workers)
    found = targets.targets(by_key, top, ours) + peer_report.targets(peers)
    found += workers_report.targets(workers)
    found.append(jwt_target(by_key))
    if phases.callers_target is not None:
        found.append(phases.callers_target)
    found += sandbox_report.targets(phases.sandbox)
    print()
    print("targets (reported, not asserted):")
    print(targets.targets_text(found))
    if phases.stages is not None:
        print("\nwhere the time goes: list 10 sampled by py-spy in a run of its own, each stage's")
        print("share of the samples scaled to the unsampled list 10's CPU per request:")
        recording = _stage_recording(phases)
        us = _list_us(rows)
        print(layers.table(recording, us) if recording else f"  {phases.stages.note}")
    profiles = [path for row in rows for path in row.profiles]
    if profiles:
        print("\npy-spy profiles (the profiled rows ran slower for it):")
        print("\n".join(f"  {path}" for path in profiles))
        print(
            "\nwhere the time goes (py-spy samples by stage, scaled to the row's CPU per request):"
        )
        for row in rows:
            for path in row.profiles:
                if path.endswith("-collapsed.txt"):
                    print(layers.table(Path(path), row.cpu_us_per_request))
    return found


def _stage_recording(phases: Phases) -> Path | None:
    """The stages run's py-spy recording (collapsed stacks), if it recorded anything."""
    profiles = phases.stages.profiles if phases.stages is not None else []
    return next((Path(p) for p in profiles if p.endswith("-collapsed.txt")), None)


def _list_us(rows: list[Measurement]) -> float | None:
    """The unsampled list 10's CPU per request, which the stages' shares are scaled to."""
    return next((row.cpu_us_per_request for row in rows if row.key == "list10"), None)


def stages_json(phases: Phases, rows: list[Measurement]) -> dict[str, object] | None:
    """The stages table as data: each stage's share of the samples, and the µs they scale to."""
    recording = _stage_recording(phases)
    if recording is None:
        return None
    counts = layers.split(recording.read_text())
    total = sum(counts.values()) or 1
    us = _list_us(rows)
    return {
        "us_per_request": us,
        "stages": {
            stage: {"share": count / total, "us": None if us is None else us * count / total}
            for stage, count in counts.most_common()
        },
    }
