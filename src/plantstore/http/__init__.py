"""The HTTP layer every feature's routes stand on, knowing no feature: dispatch of hot routes,
strict parsing of a request's parts, responses with the Error body, keep-alive, CORS and rate
limits."""
