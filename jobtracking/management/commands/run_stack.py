"""`make run`: the whole local stack in one terminal; Ctrl-C stops all of it.

Ports are checked before anything starts (one clear message and exit 1 when one is taken), and
the last start-up line, printed once every server answers, repeats the admin URL and login."""

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from extraction.sandbox.server import CONTROL_TOKEN_HEADER
from jobtracking.management.commands.seed_demo import demo_login

MANAGE = str(Path(__file__).resolve().parents[3] / "manage.py")
START_TIMEOUT_SECONDS = 60


def port_taken(port: int) -> bool:
    with socket.socket() as probe:
        # As the servers bind: a port left in TIME_WAIT by a stopped run is free to them.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


class Command(BaseCommand):
    help = "Run the web server, the supervised worker cluster, the dispatcher and the sandbox."

    def add_arguments(self, parser):
        parser.add_argument(
            "--port",
            type=int,
            default=int(os.environ.get("PORT", 8000)),
            help="The web server's port (default 8000, or PORT).",
        )
        parser.add_argument(
            "--sandbox-port",
            type=int,
            default=int(os.environ.get("SANDBOX_PORT", 8765)),
            help="The sandbox extractor's port (default 8765, or SANDBOX_PORT).",
        )
        parser.add_argument(
            "--sandbox-latency",
            default=os.environ.get("SANDBOX_LATENCY", "1,4"),
            help="Seconds a sandbox extraction takes: N or MIN,MAX (default 1,4).",
        )
        parser.add_argument(
            "--check-ports", action="store_true", help="Only check that the ports are free."
        )
        parser.add_argument(
            "--verbose", action="store_true", help="Show django-q2's line for every task."
        )

    def check_ports(self, ports: dict[str, int]) -> None:
        taken = [f"{port} ({name})" for name, port in ports.items() if port_taken(port)]
        if taken:
            raise CommandError(
                f"Port {' and '.join(taken)} already in use, perhaps by another `make run`. "
                "Stop it, or choose others: PORT=8001 SANDBOX_PORT=8766 make run"
            )

    def handle(self, *args, **options):
        ports = {"web": options["port"], "sandbox": options["sandbox_port"]}
        self.check_ports(ports)
        if options["check_ports"]:
            return
        commands = {
            "sandbox": [
                "run_sandbox_extractor",
                "--port",
                str(options["sandbox_port"]),
                "--latency",
                options["sandbox_latency"],
            ],
            "workers": ["run_workers"],
            "dispatcher": ["run_dispatcher"],
            "web": ["runserver", f"127.0.0.1:{options['port']}", "--noreload"],
        }
        env = dict(os.environ, Q_LOG_LEVEL="INFO" if options["verbose"] else "WARNING")
        # The local settings' secret key is public: the sandbox's control routes get a token of
        # this run's own.
        token = env.setdefault("SANDBOX_CONTROL_TOKEN", secrets.token_urlsafe(24))
        children = {
            name: subprocess.Popen([sys.executable, MANAGE, *argv], env=env)
            for name, argv in commands.items()
        }
        stopping = False

        def stop(*_args):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            if not self.wait_until_up(children, ports, lambda: stopping):
                return
            user, password = demo_login()
            self.stdout.write(
                "The sandbox's /_sandbox/ routes (webhooks received, stats) take the header "
                f"{CONTROL_TOKEN_HEADER}: {token}"
            )
            self.stdout.write(
                self.style.SUCCESS(
                    f"Running: admin at http://127.0.0.1:{options['port']}/admin/  login: "
                    f"{user} / {password}  (sandbox extractor at "
                    f"http://127.0.0.1:{options['sandbox_port']}; Ctrl-C stops all)"
                )
            )
            while not stopping:
                time.sleep(0.5)
                self.raise_if_exited(children, lambda: stopping)
        finally:
            self.stop_all(children)

    def wait_until_up(self, children, ports: dict[str, int], stopping) -> bool:
        """True once every server listens; False when asked to stop first."""
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not all(listening(port) for port in ports.values()):
            self.raise_if_exited(children, stopping)
            if stopping():
                return False
            if time.monotonic() > deadline:
                raise CommandError(f"The stack did not start within {START_TIMEOUT_SECONDS} s.")
            time.sleep(0.2)
        return True

    @staticmethod
    def raise_if_exited(children, stopping) -> None:
        exited = [name for name, child in children.items() if child.poll() is not None]
        # Ctrl-C reaches the children too: their exit is then expected, not a failure. (Looked
        # at after polling: the signal has reached this process before a child has exited.)
        if exited and not stopping():
            raise CommandError(f"{', '.join(exited)} exited; the stack is stopped.")

    def stop_all(self, children) -> None:
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children.values():
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
        self.stdout.write("Stack stopped.")
