"""Webhook receivers for tests that need more than pytest-httpserver gives: kept-alive HTTP/1.1
connections that the test can count, drop or hold."""

import socket
import socketserver
import ssl
import threading


class KeepAliveReceiver(socketserver.ThreadingTCPServer):
    """Answers every POST 204 on kept-alive connections; keeps each connection it accepted and
    each request's Host header, and with a TLS context, the name each client asked for (SNI).
    A subclass's `hold` runs before each answer."""

    daemon_threads = True

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.tls, self.connections, self.hosts, self.names = tls, [], [], []
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

    def hold(self) -> None:
        """Nothing: the answer goes at once."""

    def drop_connections(self) -> None:
        """What a receiver's idle timeout does to the connections it holds."""
        for sock in self.connections:
            sock.shutdown(socket.SHUT_RDWR)


class _Answer(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.server.connections.append(self.connection)
        while self.rfile.readline():
            length = 0
            while (line := self.rfile.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
                if name.lower() == b"host":
                    self.server.hosts.append(value.strip().decode())
            self.rfile.read(length)
            self.server.hold()
            self.wfile.write(b"HTTP/1.1 204 No Content\r\n\r\n")
