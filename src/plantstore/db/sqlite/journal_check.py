"""Whether the file system could still keep a write when an fsync of the WAL returned: an
``fdatasync`` that succeeds is not proof enough on ext4.

When ext4 aborts its journal (an I/O error, ``errors=remount-ro``) while two fsyncs of one file
are under way, the second can return success for a block allocation the abort discarded. As
far as jbd2's code reads, the first fsync took the transaction down with it, and the second
finds it no longer running or committing, the only states it answers with the abort's error;
so it waits for nothing. The write is then gone at the next mount, though acknowledged. The
WAL is fsynced by the writers' flusher and by SQLite's checkpoints at once, so this can happen
to us: ``python -m trials.faults.fsync_race`` stages it.

A journal handle is refused once the journal has aborted, whichever fsync saw it first. So
after each fsync of the WAL, ``check`` asks ext4 for one: ``fallocate`` with
``FALLOC_FL_KEEP_SIZE`` over the first bytes of ``<database>-locks`` (on the same file
system), which changes nothing there but starts and stops a handle (under a microsecond). A
refusal is an ``OSError`` like the fsync's own, and the writes it covered are not
acknowledged. On a file system without ``fallocate`` there is nothing to ask, and the check
is skipped.
"""

from __future__ import annotations

import ctypes
import errno
import os

_FALLOC_FL_KEEP_SIZE = 1
_UNSUPPORTED = (errno.EOPNOTSUPP, errno.ENOSYS)

_libc = ctypes.CDLL(None, use_errno=True)
_fallocate = _libc.fallocate
_fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
_fallocate.restype = ctypes.c_int


class JournalCheck:
    """Asks the file system of one open file, after each fsync, for a journal handle."""

    def __init__(self, descriptor: int, length: int) -> None:
        self._descriptor = descriptor
        self._length = length  # the bytes asked about, from the start (allocated at the first call)
        self.supported = True

    def check(self) -> None:
        """Raise ``OSError`` if the file system can no longer write (its journal aborted)."""
        if not self.supported:
            return
        if _fallocate(self._descriptor, _FALLOC_FL_KEEP_SIZE, 0, self._length) == 0:
            return
        code = ctypes.get_errno()
        if code in _UNSUPPORTED:
            self.supported = False
            return
        raise OSError(code, os.strerror(code))
