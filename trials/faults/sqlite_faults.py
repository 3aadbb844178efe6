"""The SQLite faults, each on a fresh loop-mounted ext4 file system holding the database:
full, an I/O error (remounted read-only), frozen, the database file removed, and replaced by
an older copy, under the running service and its load."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from .config import GRACE, FaultConfig, StagingError
from .ext4 import FreezeProbe, LoopFs
from .load import id_of
from .run import Run
from .server import Server
from .verdict import FaultResult, Target

DATABASE = "plantstore.db"


def run_sqlite_fault(name: str, config: FaultConfig) -> FaultResult:
    directory = config.workdir / name
    directory.mkdir(parents=True, exist_ok=True)
    fs = LoopFs(directory, config.image_mb, "errors=remount-ro" if name == "io-error" else "")
    db = fs.mount / DATABASE
    server = Server(config, f"sqlite:///{db}", directory / "server.log")
    run = Run(name, "sqlite", config, server)
    listed: set[int] | None = None
    try:
        fs.setup()
        server.start()
        run.begin()
        STAGINGS[name](run, fs, db)
        run.finish()
        listed = run.list_plants()
    except Exception as exc:
        run.fail(exc)
    finally:
        try:
            with contextlib.suppress(StagingError, subprocess.SubprocessError):
                if fs.frozen:
                    fs.thaw()  # before anything touches the mount, or it would hang there
            run.stop_load()
            server.stop()
            check_afterwards(run, db if fs.mounted else None, listed)
        except Exception as exc:
            run.fail(exc)
        finally:
            fs.close()
    return run.result


def check_afterwards(run: Run, db: Path | None, listed: set[int] | None) -> None:
    """With the service stopped: the file's integrity, then what was acknowledged against
    what the service listed and what the file at the configured path holds."""
    stored = None
    if db is not None and db.exists():
        keep = run.config.workdir / run.result.name / "at-the-end"
        keep.mkdir(exist_ok=True)
        for path in [db, *db.parent.glob(f"{db.name}-*")]:  # before anything opens it
            if path.is_file():
                shutil.copyfile(path, keep / path.name)
        run.result.integrity = integrity_check(db)
        if run.result.integrity != "ok":
            run.result.notes.append(f"the file and its -wal as the service left them: {keep}")
        try:
            stored = plant_ids(db)
        except sqlite3.Error as exc:
            run.problems.append(f"the file could not be read after the stop ({exc})")
    if run.result.name in ("file-removed", "file-replaced"):
        judge_swapped_file(run, listed, stored)
    else:
        run.judge_lost(listed, stored)


def disk_full(run: Run, fs: LoopFs, db: Path) -> None:
    run.say("filling the file system")
    run.mark_start(fs.fill())
    run.hold(run.config.seconds)
    fs.unfill()
    run.mark_end()


def io_error(run: Run, fs: LoopFs, db: Path) -> None:
    fs.trigger_error()
    run.mark_start("an error triggered through " + str(fs.sysfs / "trigger_fs_error"))
    time.sleep(0.1)  # the remount happens in the kernel's error path; let it land
    run.evidence(fs.error_evidence())
    run.hold(run.config.seconds)

    def repair() -> None:
        fs.unmount()
        status, summary = fs.fsck()
        run.evidence(f"e2fsck -fy exit {status}: {summary}")
        fs.mount_fs()

    run.operator_restart(repair)


def frozen(run: Run, fs: LoopFs, db: Path) -> None:
    fs.freeze()
    run.mark_start("fsfreeze -f")
    probe = FreezeProbe(fs.mount)
    if probe.finished.wait(0.5):
        raise StagingError("a write and fsync went through the frozen file system")
    run.evidence("a write and fsync of another file on it stayed blocked")
    run.hold(run.config.frozen_seconds - 0.5)
    fs.thaw()
    run.mark_end()
    probe.join()


def file_removed(run: Run, fs: LoopFs, db: Path) -> None:
    held = fs.mount / "held.db"
    os.link(db, held)  # the removed file's data stays reachable for the check
    db.unlink()
    run.mark_start(
        f"rm {db.name} (its inode kept by a hard link, links now {held.stat().st_nlink})"
    )
    run.hold(run.config.seconds)

    def start_afresh() -> None:  # the operator's choice when a bare restart is refused
        leftovers = sorted(fs.mount.glob(f"{db.name}-*"))
        for leftover in leftovers:
            leftover.unlink()
        run.evidence(f"the operator removed {', '.join(p.name for p in leftovers)} to start afresh")

    run.operator_restart(lambda: snapshot_old(run, fs, db, held), if_refused=start_afresh)


def file_replaced(run: Run, fs: LoopFs, db: Path) -> None:
    backup = fs.mount / "backup.db"
    source = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)  # no checkpoint
    try:
        with contextlib.closing(sqlite3.connect(backup)) as target:
            source.backup(target)
    finally:
        source.close()
    checked = integrity_check(backup)
    if checked != "ok" or backup.with_name(f"{backup.name}-wal").exists():
        raise StagingError(f"the backup is not a sound single file: integrity_check {checked}")
    time.sleep(0.5)  # more writes the backup lacks
    held = fs.mount / "held.db"
    os.link(db, held)
    before = db.stat().st_ino
    copy = fs.mount / f"{db.name}.new"
    subprocess.run(["cp", str(backup), str(copy)], check=True, timeout=30)
    subprocess.run(["mv", str(copy), str(db)], check=True, timeout=30)
    run.mark_start(f"cp backup && mv over {db.name}: inode {before} -> {db.stat().st_ino}")
    run.hold(run.config.seconds)
    run.operator_restart(lambda: snapshot_old(run, fs, db, held))


STAGINGS: dict[str, Callable[[Run, LoopFs, Path], None]] = {
    "disk-full": disk_full,
    "io-error": io_error,
    "frozen": frozen,
    "file-removed": file_removed,
    "file-replaced": file_replaced,
}


def snapshot_old(run: Run, fs: LoopFs, db: Path, held: Path) -> None:
    """With the service stopped, before its restart: copy the file that was the database
    (its hard link, with its WAL) and read its plant ids."""
    old = run.config.workdir / run.result.name / "old.db"
    shutil.copyfile(held, old)
    leftovers = [
        f"{p.name} ({p.stat().st_size} bytes)" for p in sorted(fs.mount.glob(f"{db.name}-*"))
    ]
    run.result.notes.append(
        f"beside the path before the restart: {', '.join(leftovers) or 'nothing'}"
    )
    # the old file's WAL: where the service set it aside when it found the file replaced
    # (``<db>.replaced-<stamp>-wal``), else whatever is left at the path
    set_aside = sorted(fs.mount.glob(f"{db.name}.replaced-*-wal"))
    wal = set_aside[-1] if set_aside else db.with_name(f"{db.name}-wal")
    if wal.exists():
        shutil.copyfile(wal, old.with_name(f"{old.name}-wal"))
    try:
        ids = plant_ids(old)
    except sqlite3.Error as exc:  # a -wal that was not the old file's: read the file alone
        run.result.notes.append(f"the old file with the -wal beside it: {exc}; read without it")
        old.with_name(f"{old.name}-wal").unlink(missing_ok=True)
        old.with_name(f"{old.name}-shm").unlink(missing_ok=True)
        ids = plant_ids(old)
    run.old_ids = ids
    run.evidence(f"the file that was the database holds {len(ids)} plants")


def plant_ids(path: Path) -> set[int]:
    with contextlib.closing(sqlite3.connect(path, timeout=10)) as conn:
        return {id_of(str(name)) for (name,) in conn.execute("SELECT name FROM plants")}


def judge_swapped_file(run: Run, listed: set[int] | None, stored: set[int] | None) -> None:
    """Acknowledged before the swap (or within GRACE of it): in the old file. Acknowledged
    for a create sent later but before the restart: into a file no longer the database,
    lost by definition. Acknowledged after the restart: listed by the restarted service,
    and in the file at the path."""
    result = run.result
    if result.start is None or result.operator is None or result.end is None:
        run.problems.append("the swap or the restart never happened")
        run.judge_lost(listed, stored)
        return
    old = run.old_ids if run.old_ids is not None else set()
    missing_old = run.acknowledged(sent_before=result.start + GRACE) - old
    void = run.acknowledged(result.start + GRACE, result.operator)
    grace = run.acknowledged(result.start, result.start + GRACE)
    why = [
        f"{len(missing_old)} acknowledged before the swap missing from the old file",
        f"{len(void)} answered 200 for creates sent more than {GRACE:g} s after it",
    ]
    run.judge_lost(listed, stored, result.end, (len(missing_old) + len(void), why))
    if run.old_ids is None:  # what was acknowledged before the swap could not be checked
        result.lost = None
        result.lost_detail = f"the old file was not read; {result.lost_detail}"
    result.extra.append(
        Target(
            "no 200 into a file no longer the database",
            not void,
            f"{len(grace)} creates sent within {GRACE:g} s of the swap answered 200 (allowed), "
            f"{len(void)} sent later answered 200",
        )
    )


def integrity_check(db: Path) -> str:
    try:
        with contextlib.closing(sqlite3.connect(db, timeout=10)) as conn:
            rows = conn.execute("PRAGMA integrity_check").fetchall()
    except sqlite3.Error as exc:
        return f"{type(exc).__name__}: {exc}"
    return "; ".join(str(row[0]) for row in rows)[:300]
