#!/usr/bin/env python3
"""A DFSP's callback endpoint for trying kasi by hand: prints every request
the hub sends it and answers 200, as a real DFSP acknowledges a callback.

    python3 examples/dfsp.py 4001 payerfsp

Standard library only. Not for load (use `kasi bench`).
"""
import http.server
import sys


class Callback(http.server.BaseHTTPRequestHandler):
    def _receive(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        source = self.headers.get("FSPIOP-Source", "?")
        print(f"[{NAME}] {self.command} {self.path} from {source}", flush=True)
        if body:
            print(f"[{NAME}]   {body}", flush=True)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _receive

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 4001
    NAME = sys.argv[2] if len(sys.argv) > 2 else f"dfsp:{PORT}"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Callback)
    print(f"[{NAME}] listening on http://127.0.0.1:{PORT}", flush=True)
    server.serve_forever()
