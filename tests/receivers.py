"""Webhook receivers for tests that need more than pytest-httpserver gives: kept-alive HTTP/1.1
connections that the test can count, drop or hold."""

import socket
import socketserver
import ssl
import threading


class KeepAliveReceiver(socketserver.ThreadingTCPServer):
    """Answers every POST 204 on kept-alive connections; keeps each connection it accepted and
    each request (its head), and with a TLS context, the name each client asked for (SNI). A
    subclass's `answer` may wait, or answer otherwise (None: close the connection instead)."""

    daemon_threads = True

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.tls, self.connections, self.heads, self.names = tls, [], [], []
        if tls is not None:
            tls.sni_callback = lambda _sock, name, _context: self.names.append(name)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server_address[1]

    def __exit__(self, *exc_info) -> None:
        self.shutdown()
        super().__exit__(*exc_info)

    def get_request(self):
        sock, address = super().get_request()
        return (self.tls.wrap_socket(sock, server_side=True) if self.tls else sock), address

    @property
    def hosts(self) -> list[str]:
        return [_header(head, b"host").decode() for head in self.heads]

    def answer(self) -> bytes | None:
        return b"HTTP/1.1 204 No Content\r\n\r\n"

    def drop_connections(self) -> None:
        """What a receiver's idle timeout does to the connections it holds."""
        for sock in self.connections:
            sock.shutdown(socket.SHUT_RDWR)


class _Answer(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.server.connections.append(self.connection)
        while line := self.rfile.readline():
            head = [line]
            while (line := self.rfile.readline()) not in (b"\r\n", b""):
                head.append(line)
            head = b"".join(head)
            self.server.heads.append(head)
            self.rfile.read(int(_header(head, b"content-length") or 0))
            answer = self.server.answer()
            if answer is None:
                return
            self.wfile.write(answer)


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None
