"""Running plantstore as its operators do, for the tests, the trials and the benchmarks alike:
free ports, ``plantstore serve`` processes, scratch PostgreSQL databases, PgBouncer, and what
/proc says of a server's processes."""
