# A keep-alive HTTP/1.1 upstream for the callgrind measurement: answers every
# request with a small JSON body, reading the request body first.
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BODY = b'{"kind":"WidgetList","apiVersion":"demo.example.io/v1","items":[]}'

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
    do_GET = answer
    do_POST = answer
    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
