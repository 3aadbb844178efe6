-- wrk script: mix.lua's 80/10/10 requests (list 10 / create / delete) at paced.lua's fixed
-- rate, both loaded unchanged from this directory. Adds a count of responses by status and a
-- done() that prints one machine-readable "paced-mix:" line: requests, p50/p99/p99.9/max in
-- microseconds (wrk's latency:percentile), errors by kind, and the next create/delete ids each
-- thread would have used, so a following run can carry on where this one stopped.
-- Environment: mix.lua's and paced.lua's (PLANTSTORE_BENCH_ID_BASE, _DELETE_FROM, _RATE,
-- _THREADS, _TOKEN).
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "mix.lua")
dofile(here .. "paced.lua")

local threads = {}
local mix_setup = setup

function setup(thread)
  mix_setup(thread)
  table.insert(threads, thread)
end

statuses = {}

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local counts = {}
  local non_2xx = 0
  local last_create, last_delete = 0, 0
  for _, thread in ipairs(threads) do
    for status, count in pairs(thread:get("statuses") or {}) do
      counts[status] = (counts[status] or 0) + count
      if status < 200 or status > 299 then
        non_2xx = non_2xx + count
      end
    end
    last_create = math.max(last_create, thread:get("next_create"))
    last_delete = math.max(last_delete, thread:get("next_delete"))
  end
  local parts = {}
  for status, count in pairs(counts) do
    table.insert(parts, string.format("%d:%d", status, count))
  end
  table.sort(parts)
  local errors = summary.errors
  io.write(string.format(
    "paced-mix: requests=%d duration_us=%d p50_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f "
      .. "non_2xx=%d connect=%d read=%d write=%d timeout=%d next_create=%d next_delete=%d "
      .. "statuses=%s\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max,
    non_2xx, errors.connect, errors.read, errors.write, errors.timeout,
    last_create, last_delete, table.concat(parts, ",")
  ))
end
