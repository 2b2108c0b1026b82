"""`make run`: the whole local stack in one terminal; Ctrl-C stops all of it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.core.management.base import BaseCommand

MANAGE = str(Path(__file__).resolve().parents[3] / "manage.py")


class Command(BaseCommand):
    help = "Run the web server, the supervised worker cluster, the dispatcher and the sandbox."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)))
        parser.add_argument("--sandbox-port", type=int, default=8765)
        parser.add_argument("--sandbox-latency", default=os.environ.get("SANDBOX_LATENCY", "1,4"))

    def handle(self, *args, **options):
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
        children = {
            name: subprocess.Popen([sys.executable, MANAGE, *argv])
            for name, argv in commands.items()
        }
        stopping = False

        def stop(*_args):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        self.stdout.write(
            self.style.SUCCESS(
                f"Running: admin at http://127.0.0.1:{options['port']}/admin/ ; sandbox "
                f"extractor at http://127.0.0.1:{options['sandbox_port']} ; Ctrl-C stops all."
            )
        )
        while not stopping:
            time.sleep(0.5)
            exited = [name for name, child in children.items() if child.poll() is not None]
            if exited:
                self.stderr.write(f"{', '.join(exited)} exited; stopping the stack.")
                break
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children.values():
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
        self.stdout.write("Stack stopped.")
