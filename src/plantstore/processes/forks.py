"""Around each fork of a worker: a stop signal is never lost, and a worker outlives no
supervisor.

A forked worker inherits the supervisor's SIGTERM handler until granian installs its own,
0.1 s later; a SIGTERM in between was lost, and that worker served on until killed. So the
kernel holds the stop signals across the fork, and a just-forked worker ends on one until
granian takes the signals over.
"""

from __future__ import annotations

import ctypes
import os
import signal

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
_PR_SET_PDEATHSIG = 1
# What the kernel sends a worker when its supervisor dies. Not SIGTERM itself: every thread
# of the worker inherits the setting and the kernel signals the worker once per thread, and
# granian's SIGTERM handler, called a third time while its stop is under way, blocks the
# worker's main thread for good. This one is turned into a single SIGTERM.
PARENT_DEATH_SIGNAL = signal.SIGUSR1


class WorkerForks:
    """The supervisor's fork hooks; ``install`` registers them, in the supervisor only."""

    def __init__(self) -> None:
        self._supervisor = os.getpid()  # the hooks act on forks of this process (workers) only
        self._held_mask: set[int | signal.Signals] = set()
        self._stopping_for_the_supervisor = False

    def install(self) -> None:
        os.register_at_fork(
            before=self._hold_stop_signals,
            after_in_parent=self._release_stop_signals,
            after_in_child=self._stop_signals_end_a_starting_worker,
        )

    def _hold_stop_signals(self) -> None:
        """Around each fork the kernel holds stop signals: Python would drop one caught
        mid-fork."""
        if os.getpid() == self._supervisor:
            self._held_mask.clear()
            self._held_mask.update(signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS))

    def _release_stop_signals(self) -> None:
        if os.getpid() == self._supervisor:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._held_mask)

    def _stop_signals_end_a_starting_worker(self) -> None:
        """In a just-forked worker: a stop signal ends it, until granian's handler replaces
        this. Installed while the signals are still held, so one sent during the fork is
        delivered here, to this handler, once they are released."""
        if os.getppid() != self._supervisor:
            return  # a fork made by a worker, or by something else: not ours to change
        for stop in STOP_SIGNALS:
            signal.signal(stop, _end_starting_worker)
        self._stop_when_the_supervisor_dies()
        signal.pthread_sigmask(signal.SIG_SETMASK, self._held_mask)

    def _stop_when_the_supervisor_dies(self) -> None:
        """Have the kernel signal this worker if its supervisor dies (SIGKILLed, say), and
        stop on it as on SIGTERM, the graceful stop: an orphaned worker would serve on,
        holding the port its restarted service needs, while requests in flight finish and
        every acknowledged write stays. (Linux; granian forks its workers on its main thread,
        whose end is what the kernel watches.)"""
        prctl = getattr(ctypes.CDLL(None), "prctl", None)  # this process's own libc
        if prctl is None:
            return  # not Linux: an orphan serves on until stopped, as before
        signal.signal(PARENT_DEATH_SIGNAL, self._supervisor_died)
        if prctl(_PR_SET_PDEATHSIG, int(PARENT_DEATH_SIGNAL), 0, 0, 0) != 0:
            return
        if os.getppid() != self._supervisor:  # it died before the kernel was told
            self._supervisor_died()

    def _supervisor_died(self, signum: int = 0, frame: object = None) -> None:
        """The parent-death signal, however many times it comes: one SIGTERM to this
        worker."""
        if not self._stopping_for_the_supervisor:
            self._stopping_for_the_supervisor = True
            os.kill(os.getpid(), signal.SIGTERM)


def _end_starting_worker(signum: int, frame: object) -> None:
    os._exit(0)  # nothing is open yet: the store opens after granian takes the signals over
