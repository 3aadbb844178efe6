"""The pieces every job shares: servers, wrk, measuring a run, process figures
from /proc, seeding, PostgreSQL scratch databases and the report (bench/README.md has the
map); wrk's Lua scripts are in lua/."""
