"""The process model of ``plantstore serve``, in one place.

One supervisor (``supervisor.py``) checks nothing and serves nothing itself: it makes what
the workers share, forks them through granian, replaces one that dies, and stops them all.
What a worker gets from it is one ``Inheritance`` (``inheritance.py``), handed to the
worker's app factory as an argument when granian loads it in the fresh process: its
settings, the rate budgets' shared table (``http/machine_budget.py``), and the lock file of
the once-per-machine duties (``duty.py``: webhook delivery and the sandbox purge run in one
worker at a time). ``forks.py`` keeps a stop signal that lands mid-fork from being lost, and
ends a worker whose supervisor died.

Who writes a SQLite file is decided by the database itself, not here: the first worker to
lock the file's writer lock owns the one writer, the others relay their writes to it, and
another takes over when it dies (``db/sqlite/machine_writer.py``).
"""
