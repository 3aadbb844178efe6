-- wrk script: GET the URL's path at a fixed overall rate, with each request's latency counted
-- from when the schedule said it was due, not from when wrk got round to sending it. A stall
-- then shows in the figures: the requests that fell due during it count the time they waited
-- (no coordinated omission). wrk's own latency summary still counts from the send.
--
-- The schedule: slot k is due at t0 + k * interval. A free connection reserves the next slot in
-- delay() and waits for it, rounded down to wrk's whole milliseconds (so rounding never makes a
-- request late). request() claims the earliest slot not yet claimed: when every connection is
-- busy, the slots that fall due meanwhile queue and are served in order, as a user's requests
-- would be. Each request's origin, the earlier of its slot and its actual send, travels in
-- X-Request-ID; the server echoes it (plantstore does) and response() records now - origin. An
-- answer without the echo is counted as unmatched, and its latency is lost.
--
-- done() prints one line: "schedule: requests=N matched=N unmatched=N late=N p50_us=... p90_us=
-- ... p99_us=... p999_us=... max_us=...", late being the sends more than 1 ms after their slot.
-- PLANTSTORE_BENCH_RATE: requests/s over all threads; PLANTSTORE_BENCH_THREADS: wrk's -t.
-- PLANTSTORE_BENCH_CREATE_FROM (one thread only): POST /plants with ids from it up instead.
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } sched_timespec;
int clock_gettime(int clock_id, sched_timespec *tp);
]]
local CLOCK_MONOTONIC = 1
local now_ts = ffi.new("sched_timespec")

local function now_us()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, now_ts)
  return tonumber(now_ts.tv_sec) * 1000000 + tonumber(now_ts.tv_nsec) / 1000
end

local rate = tonumber(os.getenv("PLANTSTORE_BENCH_RATE"))
local create_from = tonumber(os.getenv("PLANTSTORE_BENCH_CREATE_FROM") or "")
local threads = tonumber(os.getenv("PLANTSTORE_BENCH_THREADS") or "1")
local interval_us = 1000000 * threads / rate
local start_us = nil
local reserved = 0 -- slots handed to waiting connections by delay()
local claimed = 0 -- slots taken by requests actually sent

local all_threads = {}

function setup(thread)
  table.insert(all_threads, thread)
end

-- per thread, read back by done()
samples = {}
unmatched = 0
late = 0

function delay()
  local now = now_us()
  if start_us == nil then
    start_us = now
  end
  local due = start_us + reserved * interval_us
  reserved = reserved + 1
  local wait_ms = math.floor((due - now) / 1000)
  return wait_ms > 0 and wait_ms or 0
end

function request()
  local now = now_us()
  if start_us == nil then -- wrk's own check of the script, before any connection
    return wrk.format()
  end
  local due = start_us + claimed * interval_us
  claimed = claimed + 1
  if now - due > 1000 then
    late = late + 1
  end
  local origin = math.min(due, now)
  wrk.headers["X-Request-ID"] = string.format("sched-%.0f", origin)
  if create_from ~= nil then
    wrk.headers["Content-Type"] = "application/json"
    local body = string.format('{"id":%d,"name":"paced plant"}', create_from + claimed)
    return wrk.format("POST", "/plants", nil, body)
  end
  return wrk.format()
end

function response(status, headers, body)
  local now = now_us()
  local id = headers["x-request-id"] or headers["X-Request-ID"] or ""
  local origin = tonumber(id:match("^sched%-(%d+)$"))
  if origin == nil then
    unmatched = unmatched + 1
    return
  end
  samples[#samples + 1] = now - origin
end

local function percentile(sorted, p)
  if #sorted == 0 then
    return 0
  end
  local index = math.max(1, math.ceil(#sorted * p / 100))
  return sorted[index]
end

function done(summary, latency, requests)
  local all, missing, behind = {}, 0, 0
  for _, thread in ipairs(all_threads) do
    for _, value in ipairs(thread:get("samples")) do
      all[#all + 1] = value
    end
    missing = missing + thread:get("unmatched")
    behind = behind + thread:get("late")
  end
  table.sort(all)
  io.write(string.format(
    "schedule: requests=%d matched=%d unmatched=%d late=%d p50_us=%.1f p90_us=%.1f "
      .. "p99_us=%.1f p999_us=%.1f max_us=%.1f\n",
    summary.requests, #all, missing, behind,
    percentile(all, 50), percentile(all, 90), percentile(all, 99), percentile(all, 99.9),
    all[#all] or 0
  ))
end
