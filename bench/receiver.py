"""A webhook receiver for the benchmarks: `python -m bench.receiver --mode ok|hang --port N`.

`ok` answers every POST with 204 at once. `hang` reads the request and never answers: the
connection stays open until the sender gives up and closes it. In both modes `GET /_stats`
answers `{"requests": POSTs received, "open": connections held open now, "cpu_s": this process's
CPU seconds}`.

A process of its own, like `bench.files`: in the bench's process it would compete for the GIL
with the loop that creates the jobs. It is one asyncio loop that reads just the request line,
`Content-Length` and the body: in production the receiver runs on another machine, and a
thread per connection with `http.server`'s header parsing cost this two-core machine about as much
CPU per delivery as the sender, which the webhook rows would have charged to the service.
"""

import argparse
import asyncio
import json
import time

STATS = {"requests": 0, "open": 0}
NO_CONTENT = b"HTTP/1.1 204 No Content\r\n\r\n"


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """The request's line (the body is read and dropped); None once the sender has closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    line, _, headers = head.partition(b"\r\n")
    length = 0
    for header in headers.split(b"\r\n"):
        name, _, value = header.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if length:
        await reader.readexactly(length)
    return line


async def serve(mode: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while (line := await read_request(reader)) is not None:
            if line.startswith(b"GET"):
                body = json.dumps(STATS | {"cpu_s": time.process_time()}).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
                )
                break
            STATS["requests"] += 1
            if mode == "hang":
                STATS["open"] += 1
                try:
                    while await reader.read(1 << 16):  # until the sender closes its end
                        pass
                finally:
                    STATS["open"] -= 1
                break
            writer.write(NO_CONTENT)  # keep-alive, as a real receiver would allow
        await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main(mode: str, port: int) -> None:
    # A backlog for every worker connecting at once.
    server = await asyncio.start_server(
        lambda r, w: serve(mode, r, w), "127.0.0.1", port, backlog=128
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("ok", "hang"), default="ok")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(main(args.mode, args.port))
