-- wrk script: POST /plants with a fresh id per request (each wrk thread owns an id range).
-- PLANTSTORE_BENCH_ID_BASE (default 0) moves the whole range, so several runs against one
-- database never repeat an id.
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
