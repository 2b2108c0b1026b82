"""A static file server for the benchmarks' source URLs: `python -m bench.files PORT FOLDER`.

Python's `http.server` speaks HTTP/1.0 (a new connection per file) or, with keep-alive, writes
headers and body separately and meets the client's delayed ACK (~40 ms a file). This one keeps
connections alive and answers in one segment, like the sandbox.
"""

import functools
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


class Handler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    def log_message(self, *args) -> None:
        pass


class Server(ThreadingHTTPServer):
    # The sandbox fetches many files at once: the default backlog of 5 overflows, and each
    # dropped SYN costs the fetch a 1 s retransmit.
    request_queue_size = 1024


def main() -> None:
    port, folder = int(sys.argv[1]), sys.argv[2]
    server = Server(("127.0.0.1", port), functools.partial(Handler, directory=folder))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
