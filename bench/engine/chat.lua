-- wrk script for scripts/bench-engine.sh: POST the fixed chat request (BODY_FILE, default
-- bench/engine/chat-100.json: non-streaming, a ~100-token prompt, max_tokens 16) to the URL's
-- path (/v1/chat/completions) and, when done, print one machine-readable line with exact
-- counts and percentiles in microseconds:
--   WRK_RESULT {"requests":..,"duration_us":..,"rps":..,"p50_us":..,"p99_us":..,"errors":{..}}
-- No request()/response() callbacks, so wrk pre-builds the request and measures at full speed.

local path = os.getenv("BODY_FILE") or "bench/engine/chat-100.json"
local f = assert(io.open(path, "rb"), "cannot open body file " .. path)
local body = f:read("*a")
f:close()

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    'WRK_RESULT {"requests":%d,"duration_us":%d,"rps":%.2f,"p50_us":%.1f,"p90_us":%.1f,' ..
    '"p99_us":%.1f,"max_us":%.1f,"mean_us":%.2f,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}\n',
    summary.requests, summary.duration, summary.requests / secs,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    latency.mean, e.connect, e.read, e.write, e.status, e.timeout))
end
