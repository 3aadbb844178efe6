-- wrk script: 80% GET /plants?limit=10, 10% create (fresh ids), 10% delete (each pre-seeded id
-- once), chosen per request by a fixed ten-slot pattern so the shares are exact.
-- PLANTSTORE_BENCH_ID_BASE: first create id; PLANTSTORE_BENCH_DELETE_FROM: first id to delete;
-- PLANTSTORE_BENCH_THREADS: wrk's -t (both id sequences are strided by it).
local threads_started = 0
local create_first = tonumber(os.getenv("PLANTSTORE_BENCH_ID_BASE"))
local delete_first = tonumber(os.getenv("PLANTSTORE_BENCH_DELETE_FROM"))
local stride = tonumber(os.getenv("PLANTSTORE_BENCH_THREADS") or "1")

function setup(thread)
  thread:set("next_create", create_first + threads_started)
  thread:set("next_delete", delete_first + threads_started)
  threads_started = threads_started + 1
end

local token = "Bearer " .. os.getenv("PLANTSTORE_BENCH_TOKEN")
local list_request = nil
local sent = 0

function init(args)
  list_request = wrk.format("GET", "/plants?limit=10", { Authorization = token })
end

request = function()
  sent = sent + 1
  local slot = sent % 10
  if slot == 3 then
    local id = next_create
    next_create = next_create + stride
    local body = string.format('{"id":%d,"name":"mixed plant","tag":"m"}', id)
    local headers = { Authorization = token, ["Content-Type"] = "application/json" }
    return wrk.format("POST", "/plants", headers, body)
  elseif slot == 7 then
    local id = next_delete
    next_delete = next_delete + stride
    return wrk.format("DELETE", string.format("/plants/%d", id), { Authorization = token })
  end
  return list_request
end
