"""The pieces every benchmark script shares: servers, wrk, measuring a run, process figures
from /proc, seeding, PostgreSQL scratch databases and the report (bench/README.md has the
map)."""
