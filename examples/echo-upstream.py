#!/usr/bin/env python3
"""An upstream that answers with what it was told of the caller.

The quickstart routes /echo/ here in `identity = "request-header"` mode, so
the gateway sets kube's front-proxy headers (X-Remote-User, X-Remote-Uid,
one X-Remote-Group per group, X-Remote-Extra-<key>) from the user it
authenticated, and removes the client's Authorization and any X-Remote-*
the client wrote itself. This upstream shows which of those it received.

    python3 examples/echo-upstream.py          # listens on 127.0.0.1:9000
    python3 examples/echo-upstream.py PORT     # another port (0: any free one)

Python's standard library only. It trusts the headers because it listens on
127.0.0.1 alone; a real service behind an https:// upstream verifies the
gateway's client certificate first (docs/deploy.md).
"""

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

IDENTITY = ["X-Remote-User", "X-Remote-Uid", "X-Remote-Group"]
EXTRA_PREFIX = "x-remote-extra-"


def told(headers):
    """The identity headers received, one line each, then Authorization."""
    lines = []
    for name in IDENTITY:
        lines += [f"{name}: {value}" for value in headers.get_all(name, [])]
    for name, value in headers.items():
        if name.lower().startswith(EXTRA_PREFIX):
            lines.append(f"{name}: {value}")
    authorization = "received" if "Authorization" in headers else "(none)"
    lines.append(f"Authorization: {authorization}")
    return lines


class Echo(BaseHTTPRequestHandler):
    def do_GET(self):
        lines = [f"{self.command} {self.path}: the gateway says the caller is"]
        body = ("\n".join(lines + told(self.headers)) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
    server = ThreadingHTTPServer(("127.0.0.1", port), Echo)
    print(f"echo upstream on http://127.0.0.1:{server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
