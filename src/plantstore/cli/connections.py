"""How many connections a worker may hold, and the open-file limit behind that.

granian (hyper) closes a connection that has not sent a whole request head within the header
deadline, counted from the moment it was accepted (HTTP/1 only: with HTTP/2 detection on, a
connection that sends nothing waits in detection with no timer), and again from the end of
each answer, so the same deadline is the idle deadline of a kept-alive connection. What is
left to bound is how many connections may be open at once: granian's ``backpressure``, the
connections one worker holds. Its default (the listen backlog, 1,024, divided by the
workers) let about 1,030 connections that sent nothing take the whole service down; here it
is the worker's open-file limit, raised first as far as the machine allows, less what the
worker needs for itself.
"""

from __future__ import annotations

import resource

RESERVED_FILES = 256  # the database and its WAL, logs, metrics files, webhook sockets, ...


def raise_open_file_limit() -> int:
    """Raise this process's soft open-file limit to its hard limit (the workers forked from
    it inherit it); return the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1_048_576)
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass  # a container may refuse: keep what we have
    return soft if soft != resource.RLIM_INFINITY else hard


def connections_per_worker(open_files: int) -> int:
    """The most connections one worker holds open at once (granian's ``backpressure``)."""
    return max(64, open_files - RESERVED_FILES)
