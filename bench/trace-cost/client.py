# N requests of bench/wrk/mix.lua's cycle (4 lists, 1 create) on one
# keep-alive connection; every answer must be a 200.
import http.client
import sys

port, count = int(sys.argv[1]), int(sys.argv[2])
path = "/apis/demo.example.io/v1/namespaces/default/widgets"
body = '{"apiVersion":"demo.example.io/v1","kind":"Widget","metadata":{"name":"w1","namespace":"default"},"spec":{"replicas":3}}'
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
for i in range(count):
    step = i % 5
    if step < 4:
        token = "alice-token" if step % 2 == 0 else "bob-token"
        conn.request("GET", path, headers={"Authorization": "Bearer " + token, "Accept": "application/json"})
    else:
        conn.request("POST", path, body=body, headers={"Authorization": "Bearer alice-token", "Content-Type": "application/json", "Accept": "application/json"})
    r = conn.getresponse()
    r.read()
    if r.status != 200:
        sys.exit(f"request {i}: {r.status}")
