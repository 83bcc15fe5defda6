-- wrk script for scripts/bench-gateway.sh: POST the route's fixed body (BODY_FILE, default
-- bench/gateway/body-4k.json) to the target's path (the URL's path: /invocations or
-- /v1/chat/completions) and, when done, print one machine-readable line with exact counts and
-- percentiles in microseconds (a streamed answer counts when its last chunk has arrived):
--   WRK_RESULT {"requests":..,"duration_us":..,"rps":..,"p50_us":..,"p99_us":..,"errors":{..}}
-- No request()/response() callbacks, so wrk pre-builds the request and measures at full speed.
-- WRK_DELAY_MS=N (the fixed-rate CPU runs) pauses each connection N ms after each answer.

local path = os.getenv("BODY_FILE") or "bench/gateway/body-4k.json"
local f = assert(io.open(path, "rb"), "cannot open body file " .. path)
local body = f:read("*a")
f:close()

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"

local pause_ms = tonumber(os.getenv("WRK_DELAY_MS") or "")
if pause_ms then
  function delay() return pause_ms end
end

function done(summary, latency, requests)
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    'WRK_RESULT {"requests":%d,"duration_us":%d,"rps":%.2f,"p50_us":%.1f,"p75_us":%.1f,' ..
    '"p90_us":%.1f,"p99_us":%.1f,"max_us":%.1f,"mean_us":%.2f,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}\n',
    summary.requests, summary.duration, summary.requests / secs,
    latency:percentile(50), latency:percentile(75), latency:percentile(90),
    latency:percentile(99), latency.max, latency.mean,
    e.connect, e.read, e.write, e.status, e.timeout))
end
