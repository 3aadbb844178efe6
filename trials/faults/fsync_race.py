"""The fsync that ext4 reports as a success for a write its aborted journal dropped, staged
many times over: ``python -m trials.faults.fsync_race --runs 250`` (needs root).

Each run makes a small ext4 file system (``errors=remount-ro``), appends numbered 4 KiB
records to a WAL beside a database there, each made durable by the service's own
``WalFlush.after_commit`` before it counts as acknowledged, while another thread fsyncs the
same file in a loop (as SQLite's checkpoints do), and triggers an ext4 error 50 to 70 ms in.
Then it unmounts, runs ``e2fsck -fy``, mounts again and counts the acknowledged records that
are not there. ``--without-check`` leaves out the journal check after each fsync
(``plantstore.db.sqlite.journal_check``), to show what it prevents.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import threading
import time
from pathlib import Path

from plantstore.db.sqlite import journal_check
from plantstore.db.sqlite.flush import WalFlush

from .ext4 import LoopFs

RECORD = 4096


def one_run(directory: Path, delay: float) -> tuple[int, int]:
    """Acknowledged records, and how many of them were not in the file afterwards."""
    fs = LoopFs(directory, 64, "errors=remount-ro")
    try:
        fs.setup()
        database = fs.mount / "race.db"
        wal = Path(f"{database}-wal")
        descriptor = os.open(wal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        flush = WalFlush(database)
        acknowledged = 0
        stop = threading.Event()

        def append() -> None:
            nonlocal acknowledged
            number = 0
            while not stop.is_set():
                number += 1
                try:
                    os.write(descriptor, number.to_bytes(8, "little") * (RECORD // 8))
                    flush.after_commit()
                except OSError:
                    return
                acknowledged = number

        def checkpoint() -> None:
            other = os.open(wal, os.O_RDONLY)
            try:
                while not stop.is_set():
                    with contextlib.suppress(OSError):
                        os.fsync(other)
            finally:
                os.close(other)

        threads = [threading.Thread(target=append), threading.Thread(target=checkpoint)]
        try:
            for thread in threads:
                thread.start()
            time.sleep(delay)
            fs.trigger_error()
            time.sleep(0.05)
        finally:  # a failed trigger must not leave the threads running forever
            stop.set()
            for thread in threads:
                if thread.is_alive():
                    thread.join()
        os.close(descriptor)
        flush.close()
        fs.unmount()
        fs.fsck()
        fs.mount_fs()
        data = wal.read_bytes()
        kept = {int.from_bytes(data[at : at + 8], "little") for at in range(0, len(data), RECORD)}
        return acknowledged, sum(1 for n in range(1, acknowledged + 1) if n not in kept)
    finally:
        fs.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=250)
    parser.add_argument("--without-check", action="store_true")
    args = parser.parse_args()
    if args.without_check:
        journal_check.JournalCheck.check = lambda self: None  # type: ignore[method-assign]
    lost_runs = lost_records = acknowledged = 0
    with tempfile.TemporaryDirectory(prefix="fsync-race-") as work:
        for run in range(args.runs):
            acked, lost = one_run(Path(work), 0.05 + (run % 7) * 0.003)
            acknowledged += acked
            if lost:
                lost_runs += 1
                lost_records += lost
                print(f"run {run}: {lost} of {acked} acknowledged records lost", flush=True)
    check = "without" if args.without_check else "with"
    print(
        f"{args.runs} runs {check} the journal check: {acknowledged} records acknowledged, "
        f"{lost_records} lost, in {lost_runs} runs"
    )


if __name__ == "__main__":
    main()
