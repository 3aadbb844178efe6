-- wrk script: GET the URL's path at a fixed overall rate instead of flat out (Debian's wrk has
-- no -R). Every request claims the next slot of one schedule per thread (monotonic clock via
-- LuaJIT's ffi) and waits for it in delay(); a connection that falls behind sends at once, so
-- the schedule, not the responses, sets the pace (open-loop-ish). wrk counts latency from the
-- send, not from the slot, so a stall's queue is hidden (coordinated omission): bench.speed's paced
-- runs use scheduled.lua, which counts from the slot; this file remains for paced_mix.lua.
-- PLANTSTORE_BENCH_RATE: requests/s over all threads; PLANTSTORE_BENCH_THREADS: wrk's -t.
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clock_id, bench_timespec *tp);
]]
local CLOCK_MONOTONIC = 1
local now_ts = ffi.new("bench_timespec")

local function now_ms()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, now_ts)
  return tonumber(now_ts.tv_sec) * 1000 + tonumber(now_ts.tv_nsec) / 1000000
end

local threads = tonumber(os.getenv("PLANTSTORE_BENCH_THREADS") or "1")
local interval_ms = 1000 * threads / tonumber(os.getenv("PLANTSTORE_BENCH_RATE"))
local next_slot = nil

function delay()
  local now = now_ms()
  if next_slot == nil then
    next_slot = now
  end
  local wait = next_slot - now
  next_slot = next_slot + interval_ms
  if wait <= 0 then
    return 0
  end
  return math.floor(wait + 0.5) -- wrk's timers count whole milliseconds
end
