"""``make bench``'s own parts (its ``__main__`` runs them): the phases (reference ceiling, SQLite,
PostgreSQL), the peers, SQLite on several workers, and the targets each is judged by."""
