-- wrk script: DELETE /plants/{id}, each id of a pre-seeded range exactly once (so every
-- answer is a 204; a 404 means the range was too small for the run).
-- PLANTSTORE_BENCH_DELETE_FROM: first id; PLANTSTORE_BENCH_THREADS: wrk's -t (ids are strided).
local threads_started = 0
local first = tonumber(os.getenv("PLANTSTORE_BENCH_DELETE_FROM"))
local stride = tonumber(os.getenv("PLANTSTORE_BENCH_THREADS") or "1")

function setup(thread)
  thread:set("next_id", first + threads_started)
  threads_started = threads_started + 1
end

local headers = { Authorization = "Bearer " .. os.getenv("PLANTSTORE_BENCH_TOKEN") }

request = function()
  local id = next_id
  next_id = next_id + stride
  return wrk.format("DELETE", string.format("/plants/%d", id), headers)
end
