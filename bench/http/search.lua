-- wrk script: POST one search body per request, cycling through a file of JSON bodies
-- (one per line; path in the first script argument), and print the figures as JSON.
local bodies = {}
local position = 0

function init(args)
  for line in io.lines(args[1]) do
    bodies[#bodies + 1] = line
  end
  position = math.random(#bodies) - 1 -- threads start at different queries
end

function request()
  position = (position % #bodies) + 1
  return wrk.format("POST", nil, { ["Content-Type"] = "application/json" }, bodies[position])
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'TANDEM_RESULT {"requests": %d, "duration_us": %d, "status_errors": %d, ' ..
    '"socket_errors": %d, "p50_us": %d, "p95_us": %d, "p99_us": %d, "mean_us": %.1f}\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.mean))
end
