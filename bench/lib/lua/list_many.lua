-- wrk script: GET /plants?limit=10, each request with the next of many tokens, in turn.
-- PLANTSTORE_BENCH_TOKENS_FILE names a file of tokens, one per line; every request is built
-- once, at start, so rotating costs wrk nothing per request.
local requests = {}
for token in io.lines(os.getenv("PLANTSTORE_BENCH_TOKENS_FILE")) do
  requests[#requests + 1] = wrk.format("GET", "/plants?limit=10",
    {["Host"] = wrk.host, ["Authorization"] = "Bearer " .. token})
end
local turn = 0

request = function()
  turn = turn + 1
  return requests[(turn % #requests) + 1]
end
