"""CPU time, memory and open files of a server's process tree, read from /proc.

``plantstore serve`` forks granian workers, so every figure covers the serving process and
all its descendants: the work may happen in any of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from plantstore.db.sqlite.locks_file import writer_pid

PROC = Path("/proc")
_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields after the command name (which may itself hold spaces or parentheses)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def running(pid: int) -> bool:
    """Whether ``pid`` still runs: a zombie (dead, not yet reaped by its new parent) does not."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def process_tree(root: int) -> list[int]:
    """``root`` and every live descendant, found through each process's parent id."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, []))
    return tree


def pids_named(command: str) -> list[int]:
    """Every live process whose command name is ``command`` (such as PostgreSQL's backends)."""
    pids = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                name = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if name == command:
                pids.append(int(entry.name))
    return pids


def cpu_seconds(pids: list[int]) -> float:
    """User plus system time consumed so far by these processes (all their threads)."""
    ticks = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15
    return ticks / _TICKS_PER_SECOND


def _task_files(pids: list[int], name: str) -> Iterator[str]:
    """The text of each thread's ``/proc/<pid>/task/<tid>/<name>``, for these processes'
    threads that still run (one that ended meanwhile, or a file the kernel lacks, is left
    out)."""
    for pid in pids:
        try:
            tasks = os.listdir(PROC / str(pid) / "task")
        except OSError:
            continue
        for task in tasks:
            try:
                yield (PROC / str(pid) / "task" / task / name).read_text()
            except OSError:
                continue


def context_switches(pids: list[int]) -> int:
    """Times the threads of these processes have left a CPU so far, waiting (for I/O, a lock,
    a wake-up: voluntary) or pre-empted. Each hand-off between threads costs one or two, so
    per request they show how much of a request's time goes to handing it on."""
    switches = 0
    for status in _task_files(pids, "status"):
        for line in status.splitlines():
            name, _, value = line.partition(":")
            if name.endswith("ctxt_switches"):  # voluntary_ and nonvoluntary_
                switches += int(value)
    return switches


def runqueue_wait_seconds(pids: list[int]) -> float | None:
    """Time the threads of these processes have spent runnable but waiting for a core
    (``schedstat``, its second field). Where it grows faster than the CPU they use, requests
    wait for the scheduler, not for work; None where the kernel keeps no schedstat."""
    waits = [int(stat.split()[1]) for stat in _task_files(pids, "schedstat")]
    return sum(waits) / 1e9 if waits else None


def peak_rss_mb(pids: list[int]) -> float:
    """The largest VmHWM (peak resident set) among these processes, in MB."""
    return _largest_status_kb(pids, "VmHWM:") / 1024


def rss_mb(pids: list[int]) -> float:
    """The largest current VmRSS among these processes, in MB."""
    return _largest_status_kb(pids, "VmRSS:") / 1024


def _largest_status_kb(pids: list[int], field: str) -> int:
    largest_kb = 0
    for pid in pids:
        try:
            status = (PROC / str(pid) / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith(field):
                largest_kb = max(largest_kb, int(line.split()[1]))
    return largest_kb


def cpu_list(spec: str) -> list[int]:
    """A taskset CPU list (``0``, ``0-2,4``) as core numbers."""
    cores: list[int] = []
    for part in spec.split(","):
        first, _, last = part.partition("-")
        cores.extend(range(int(first), int(last or first) + 1))
    return cores


def core_busy_seconds(cores: list[int]) -> float:
    """Time these cores spent on anything but idling; hypervisor steal counts as busy."""
    ticks = 0
    for line in (PROC / "stat").read_text().splitlines():
        name, *values = line.split()
        if name[:3] == "cpu" and name[3:].isdigit() and int(name[3:]) in cores:
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, values[:8])
            ticks += user + nice + system + irq + softirq + steal
    return ticks / _TICKS_PER_SECOND


def worker_pids(root: int) -> list[int]:
    """The processes doing the serving: granian's workers, or the root if it has none."""
    tree = process_tree(root)
    return tree[1:] or tree


def open_files(pids: list[int], kind: str = "") -> int:
    """Descriptors these processes hold (only those whose link starts with ``kind``)."""
    count = 0
    for pid in pids:
        directory = PROC / str(pid) / "fd"
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        if not kind:
            count += len(names)
            continue
        for name in names:
            try:
                count += os.readlink(directory / name).startswith(kind)
            except OSError:
                continue  # closed meanwhile
    return count


def file_mb(path: Path) -> float:
    """A file's size in MB, 0 when it does not exist (a WAL is removed on a clean close)."""
    try:
        return path.stat().st_size / 1e6
    except OSError:
        return 0.0


def writer_owner(database: Path) -> int | None:
    """The process that owns the machine's SQLite writer of ``database``, if one does: the pid
    its owner notes in ``<database>-locks`` while it holds the writer's lock (/proc/locks
    shows that OFD lock with pid -1), unless that process no longer runs."""
    pid = writer_pid(database)
    return pid if pid is not None and running(pid) else None
