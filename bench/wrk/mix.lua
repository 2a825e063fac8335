-- wrk script of bench/run.sh: the read/write mix every target gets.
--
-- A cycle of 5 requests, all on the widgets API root of the bench upstream:
--   4 x GET  .../namespaces/default/widgets          (list; alice, bob, alice, bob)
--   1 x POST .../namespaces/default/widgets          (create; alice, small JSON body)
-- i.e. 80% reads, 20% writes, each with a bearer token that the full chain
-- (bench/manifests/full-*.toml) and nginx + Lua (bench/conf/nginx-lua.conf) accept
-- and allow, so every request of the mix is a 200 on every target.
--
-- With the argument `many-users` (wrk ... URL -- many-users, the target
-- wasmgate-full-pooled-many-users) the cycle is the same but each request
-- carries the token of one of 10,000 users picked at random
-- (user-0000-token .. user-9999-token, which run.sh writes into
-- bench/manifests/full-pooled-many-users.toml): the decision caches see
-- 10,000 credentials and 20,000 authorization keys instead of two users'.
--
-- At the end, one line: WRKJSON {"requests":..,"duration_us":..,"errors":{..},"latency_us":{..}}

local path = "/apis/demo.example.io/v1/namespaces/default/widgets"
local body = '{"apiVersion":"demo.example.io/v1","kind":"Widget","metadata":{"name":"w1","namespace":"default"},"spec":{"replicas":3}}'

local cycle = {}
local position = 0
local many_users = false

local function get(token)
   return wrk.format("GET", path, { ["Authorization"] = "Bearer " .. token, ["Accept"] = "application/json" })
end

local function post(token)
   return wrk.format("POST", path, {
      ["Authorization"] = "Bearer " .. token,
      ["Content-Type"] = "application/json",
      ["Accept"] = "application/json",
   }, body)
end

function init(args)
   many_users = args[1] == "many-users"
   math.randomseed(os.time())
   cycle = { get("alice-token"), get("bob-token"), get("alice-token"), get("bob-token"), post("alice-token") }
end

function request()
   position = position % #cycle + 1
   if many_users then
      local token = string.format("user-%04d-token", math.random(0, 9999))
      return position == #cycle and post(token) or get(token)
   end
   return cycle[position]
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
      '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
      '"latency_us":{"p50":%.1f,"p90":%.1f,"p99":%.1f,"p999":%.1f,"max":%.1f,"mean":%.1f}}\n',
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
      latency.max, latency.mean))
end
