-- wrk script: POST /plants with a fresh id per request (as create.lua) at a fixed overall rate
-- (as paced.lua): what a create costs at a load both worker counts carry, not at saturation.
-- PLANTSTORE_BENCH_RATE: requests/s over all threads; PLANTSTORE_BENCH_THREADS: wrk's -t;
-- PLANTSTORE_BENCH_ID_BASE: where this run's ids begin.
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

local threads_started = 0
local offset = tonumber(os.getenv("PLANTSTORE_BENCH_ID_BASE") or "0")

function setup(thread)
  thread:set("id_base", offset + threads_started * 1000000000)
  threads_started = threads_started + 1
end

local sent = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("PLANTSTORE_BENCH_TOKEN")

request = function()
  sent = sent + 1
  local body = string.format('{"id":%d,"name":"bench plant","tag":"b%d"}', id_base + sent, sent % 7)
  return wrk.format(nil, "/plants", nil, body)
end
