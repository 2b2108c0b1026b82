"""A webhook receiver for the benchmarks: `python -m bench.receiver --mode ok|hang --port N`.

`ok` answers every POST with 204 at once. `hang` reads the request and never answers: the
connection stays open until the sender gives up and closes it. In both modes `GET /_stats`
answers `{"requests": POSTs received, "open": connections held open now}`.

A process of its own, like `bench.files`: in the bench's process it would compete for the GIL
with the loop that creates the jobs.
"""

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Counters:
    lock = threading.Lock()
    requests = 0
    open = 0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real receiver would allow
    disable_nagle_algorithm = True
    mode = "ok"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with Counters.lock:
            Counters.requests += 1
        if self.mode == "hang":
            self.hang()
            return
        self.send_response(204)
        self.end_headers()

    def hang(self) -> None:
        with Counters.lock:
            Counters.open += 1
        try:
            while self.connection.recv(1 << 16):  # until the sender closes its end
                pass
        except OSError:
            pass
        finally:
            with Counters.lock:
                Counters.open -= 1
            self.close_connection = True

    def do_GET(self) -> None:
        with Counters.lock:
            body = json.dumps({"requests": Counters.requests, "open": Counters.open}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # every worker may connect at once


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("ok", "hang"), default="ok")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    Handler.mode = args.mode
    Server(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
