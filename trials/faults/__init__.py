"""Faults of the environment, staged for real under a running ``plantstore serve`` and a
bounded create load, each judged against the service's contract.

SQLite (the database on a loop-mounted 64 MB ext4 image of its own): the file system full,
an I/O error (ext4 remounts itself read-only), the file system frozen past the write
deadline, the database file removed, and replaced by an older copy, under the running
server. PostgreSQL (a throwaway cluster, ``fsync=on``): every connection of the service
ended, ten times; ``pg_ctl restart -m fast`` and ``-m immediate``; the server stopped for a
few seconds. And a second ``plantstore serve`` on the address the first one serves.

During each fault a write that cannot succeed is answered 503 with ``Retry-After`` and the
Error body (never a 500) within the write deadline plus a second; ``/readyz`` answers 503
within a second of the fault and 200 within a second of its end, without a restart;
``/healthz`` stays 200; nothing answered 200 is lost, and nothing is acknowledged into a
file that is no longer the database at the configured path.

    python -m trials.faults [--only disk-full,frozen] [--seconds 3] [--keep]

Staging needs root (loop devices, mount, ``fsfreeze``, sysfs), ``e2fsprogs`` and
``util-linux``, and the PostgreSQL binaries (``initdb``, ``pg_ctl``) for its rows. The
modules: ``config`` (settings, names), ``server`` (the processes), ``load`` (the clients and
probes), ``ext4`` and ``postgres`` (the environments), ``sqlite_faults``, ``pg_faults`` and
``port_fault`` (the stagings), ``run`` (one fault from start to verdict), ``verdict``
(measures and targets) and ``report`` (the table and the JSON).
"""
