"""The machine's WAL fsync, shared by the writers of one file, tried with real processes."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plantstore.db.sqlite import locks_file, ofd_lock
from plantstore.db.sqlite.flush import WalFlush

pytestmark = pytest.mark.server

# A flusher in another process: it takes the fsync lock, says "started" as an fsync does,
# and then hangs there until it is killed.
HANG_MID_FSYNC = """
import sys, time
from pathlib import Path
from plantstore.db.sqlite import locks_file, ofd_lock
from plantstore.db.sqlite.flush import WalFlush
flush = WalFlush(Path(sys.argv[1]))
ofd_lock.lock(flush._file, locks_file.FLUSH)
flush._started.value += 1
print("holding", flush=True)
time.sleep(60)
"""

# A writer in another process: one commit, then N more, each flushed; prints how many of the
# fsyncs it needed were its own for the first commit, and for all of them.
COMMIT_AND_FLUSH = """
import sqlite3, sys
from pathlib import Path
from plantstore.db.sqlite.flush import WalFlush
path, name, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
conn = sqlite3.connect(path, isolation_level=None, timeout=10)
conn.execute("PRAGMA synchronous = NORMAL")
flush = WalFlush(path)
conn.execute("INSERT INTO t VALUES (?, 0)", (name,))
print("committed", flush=True)
flush.after_commit()
first = flush.fsyncs
for number in range(1, count):
    conn.execute("INSERT INTO t VALUES (?, ?)", (name, number))
    flush.after_commit()
print(first, flush.fsyncs, flush=True)
"""


def wait_until_asleep(pid: int) -> None:
    """Wait until a process sleeps in the kernel (here: waits for the flush lock)."""
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "S":
        assert time.monotonic() < deadline, "the writer never waited for the lock"
        time.sleep(0.01)


@pytest.fixture
def wal_file(tmp_path: Path) -> Path:
    path = tmp_path / "flush.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (writer TEXT, number INTEGER)")
    conn.close()
    return path


def test_a_flusher_killed_mid_fsync_blocks_nobody(wal_file: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", HANG_MID_FSYNC, str(wal_file)], stdout=subprocess.PIPE, text=True
    ) as hanging:
        try:
            assert hanging.stdout is not None
            assert hanging.stdout.readline().strip() == "holding"
            conn = sqlite3.connect(wal_file, isolation_level=None)
            conn.execute("INSERT INTO t VALUES ('here', 1)")
            flush = WalFlush(wal_file)
            started, finished = flush.started_and_finished()
            assert started == finished + 1  # the other process's fsync never finished
            hanging.send_signal(signal.SIGKILL)
            hanging.wait(timeout=10)
            began = time.monotonic()
            flush.after_commit()  # its lock went with it; its unfinished fsync does not count
            assert time.monotonic() - began < 2
            assert flush.fsyncs == 1
            assert flush.started_and_finished() == (started + 1, started + 1)
            flush.close()
            conn.close()
        finally:
            hanging.kill()


def test_two_processes_share_fsyncs_and_every_commit_is_covered(wal_file: Path) -> None:
    count = 400
    flush = WalFlush(wal_file)
    ofd_lock.lock(flush._file, locks_file.FLUSH)  # an fsync under way: both writers queue behind it
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", COMMIT_AND_FLUSH, str(wal_file), name, str(count)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    try:
        for writer in writers:
            assert writer.stdout is not None
            assert writer.stdout.readline().strip() == "committed"
            wait_until_asleep(writer.pid)
        ofd_lock.unlock(flush._file, locks_file.FLUSH)
        firsts, own_fsyncs = 0, 0
        for writer in writers:
            out, _ = writer.communicate(timeout=120)
            assert writer.returncode == 0
            first, total = map(int, out.split())
            firsts += first
            own_fsyncs += total
    finally:
        for writer in writers:
            writer.kill()
    started, finished = flush.started_and_finished()
    flush.close()
    assert started == finished == own_fsyncs  # every fsync begun was finished and counted
    assert firsts == 1  # one fsync carried both first commits: the second writer waited for it
    conn = sqlite3.connect(wal_file)
    assert conn.execute("SELECT writer, count(*) FROM t GROUP BY writer").fetchall() == [
        ("a", count),
        ("b", count),
    ]
    conn.close()
