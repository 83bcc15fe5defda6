-- wrk script for scripts/bench-engine.sh's baseline: GET the URL (/health: the same HTTP
-- server, no model work) and print the same WRK_RESULT line as chat.lua.

wrk.method = "GET"

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
