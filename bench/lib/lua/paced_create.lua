-- wrk script: create.lua's creates at paced.lua's fixed rate, both loaded unchanged from this
-- directory: what a create costs at a load both worker counts carry, not at saturation.
-- Environment: create.lua's and paced.lua's (PLANTSTORE_BENCH_ID_BASE, _RATE, _THREADS,
-- _TOKEN).
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "create.lua")
dofile(here .. "paced.lua")
