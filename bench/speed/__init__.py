"""``make bench``'s own parts (bench/run.py runs them): the phases (reference ceiling, SQLite,
PostgreSQL), the peers, SQLite on several workers, and the targets each is judged by."""
