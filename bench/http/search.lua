-- wrk script: POST one search body per request, cycling through a file of JSON bodies
-- (one per line; path in the first script argument, wrk's thread count in the second),
-- and print the figures as JSON.
--
-- Where each thread starts is deterministic: wrk calls setup() once per thread, in order,
-- before any runs, and thread n (0, 1, ...) of t starts at body floor(n * count / t) + 1,
-- so one thread starts at the first body (as the in-process pass does) and two start half
-- the file apart. Lua's math.random would not spread them: wrk never seeds it, so every
-- thread and every run would draw the same number.
local bodies = {}
local position = 0
local threads_set_up = 0

function setup(thread)
  thread:set("thread_index", threads_set_up) -- a global in that thread's own Lua state
  threads_set_up = threads_set_up + 1
end

function init(args)
  for line in io.lines(args[1]) do
    bodies[#bodies + 1] = line
  end
  local threads = tonumber(args[2]) or 1
  position = math.floor((thread_index or 0) * #bodies / threads) % #bodies
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
