"""Crash safety, Jepsen-style: clients write while the server is SIGKILLed and restarted.

Several users, each with several tokens issued through the real CLI, are driven by client
threads. Each client owns a disjoint range of ids and, for every ``(user, id)`` it touches,
keeps what the plant may be now: absent, or one exact ``(name, tag)``. A 2xx narrows that to
one state; a request cut off by a kill (or answered 503 with ``Retry-After``, the contract's
"the database cannot be reached now") is *uncertain* and widens it to "as before, or as
asked", and the client then repeats exactly that request until it gets a definite answer, so
nothing else is sent for the key while an attempt may still land. A refused connection never
reached a server and changes nothing.

Any other 5xx (a 500, a 502, a 503 without ``Retry-After``) is a *fault*: the server broke
its contract. The key is widened as for an uncertain attempt (the write may have happened
before it broke) and the request repeated, but the answer is recorded and fails the run.

Meanwhile a killer lets traffic run for 50-400 ms, sends SIGKILL to the server's whole
process group, restarts ``plantstore serve`` on the same database and port, and repeats. With
several workers (``TortureConfig.workers``) some kills take one worker alone
(``worker_kill_chance``): granian replaces it while the others serve on, and the killer waits
for the replacement before going on. On SQLite that kills a writer that may hold the file's
write lock mid-transaction, or the fsync lock mid-fsync, while another process's writer waits
for it. Others take the supervisor alone (``supervisor_kill_chance``): the kernel sends its
workers SIGTERM, they stop as on any SIGTERM, and the killer restarts the server once they
are gone.
Afterwards every user's plants are listed through the API and each key is judged:

- lost: a plant whose create was acknowledged (and not later deleted, or only by a delete
  that may not have happened) is missing or differs in name or tag; or a delete of an
  acknowledged plant answered 404;
- resurrected: a plant whose delete was acknowledged is back (a name and tag that was
  sent for it, but not the state it may be in now); or a delete answered 204 for a plant
  that was surely gone;
- unexpected: a listed plant that no create could have made: a name or tag never sent for
  that key, a key never sent, another user's plant, the same key listed twice.

Answers no valid request should get (401, 409 for an identical repeat, 400, a 200 with the
wrong body, a list out of id order) are counted as odd answers, and fail the run as faults do. On SQLite the file then gets
``PRAGMA integrity_check`` after a clean stop.

``tests/e2e/test_torture.py`` runs a bounded version; ``python -m trials.torture``
(``make torture``) a long one. Both call :func:`trials.torture.engine.run_torture`. The parts:
``config`` (what a run is given and finds), ``victim`` (the server killed and restarted),
``client`` (one token's traffic), ``judge`` (what each key may be, and the final listing),
``engine`` (the run), ``__main__`` (``make torture``).
"""
