import os

from django.core.management.base import BaseCommand, CommandError

from extraction.sandbox.server import SandboxConfig, SandboxServer


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


class Command(BaseCommand):
    help = (
        "Run the bundled sandbox extractor (http_async protocol) with optional fault injection. "
        "Every flag also reads a SANDBOX_* environment variable. Control routes: "
        'POST /_sandbox/config, /_sandbox/outage ({"seconds": N}) and /_sandbox/reset; '
        "GET /_sandbox/stats and /_sandbox/webhooks. They need the X-Sandbox-Token header: "
        "SANDBOX_CONTROL_TOKEN, else a token derived from the secret key "
        "(extraction.sandbox.server.control_token)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--host",
            default=os.environ.get("SANDBOX_HOST", "127.0.0.1"),
            help="Address to listen on (default 127.0.0.1).",
        )
        parser.add_argument(
            "--port",
            type=int,
            default=int(os.environ.get("SANDBOX_PORT", 8765)),
            help="Port to listen on (default 8765).",
        )
        parser.add_argument(
            "--latency",
            default=os.environ.get("SANDBOX_LATENCY", "0"),
            help="Seconds an extraction takes: one number or a MIN,MAX range.",
        )
        for flag, help_text in (
            ("transient-rate", "share of requests answered with a 502/503"),
            ("throttle-rate", "share of requests answered with 429 and Retry-After"),
            ("permanent-failure-rate", "share of extractions that end failed"),
            ("lost-rate", "share of extractions forgotten at once (404 on poll)"),
            ("slow-rate", "share of requests answered only after --slow-seconds"),
        ):
            env = "SANDBOX_" + flag.replace("-", "_").upper()
            parser.add_argument(
                f"--{flag}", type=float, default=env_float(env, 0.0), help=help_text
            )
        parser.add_argument(
            "--throttle-retry-after",
            type=float,
            default=env_float("SANDBOX_THROTTLE_RETRY_AFTER", 1),
            help="Retry-After (seconds) sent with each --throttle-rate 429 (default 1).",
        )
        parser.add_argument(
            "--slow-seconds",
            type=float,
            default=env_float("SANDBOX_SLOW_SECONDS", 5),
            help="Seconds a --slow-rate request waits before its answer (default 5).",
        )
        parser.add_argument(
            "--poll-retry-after",
            type=float,
            default=env_float("SANDBOX_POLL_RETRY_AFTER", 0),
            help="Retry-After (seconds) sent with every unfinished poll answer; 0 for none.",
        )
        for kind in ("submit", "poll"):
            parser.add_argument(
                f"--{kind}-rate-limit",
                type=float,
                default=env_float(f"SANDBOX_{kind.upper()}_RATE_LIMIT", 0),
                help=f"{kind.capitalize()} requests a second beyond which the answer is 429 with "
                "Retry-After (a token bucket of one second's worth); 0 for no limit.",
            )
        parser.add_argument(
            "--outage-seconds",
            type=float,
            default=env_float("SANDBOX_OUTAGE_SECONDS", 0),
            help="Seconds after start during which every /v1/ request is answered 503 (no "
            "Retry-After); POST /_sandbox/outage starts or ends one at run time.",
        )
        parser.add_argument(
            "--job-retention",
            type=float,
            default=env_float("SANDBOX_JOB_RETENTION", 600),
            help="Seconds a job is kept after it ends; a poll then answers 404.",
        )
        parser.add_argument(
            "--max-result-bytes",
            type=int,
            default=int(os.environ.get("SANDBOX_MAX_RESULT_BYTES", 256 << 20)),
            help="Bytes of results kept, the least recently used dropped first (their jobs too).",
        )
        parser.add_argument(
            "--seed",
            type=int,
            default=None,
            help="Seed of the fault injection's random draws, for a run that repeats itself.",
        )

    def handle(self, *args, **options):
        try:
            low, _, high = options["latency"].partition(",")
            latency = (float(low), float(high or low))
        except ValueError:
            raise CommandError("--latency takes a number or MIN,MAX") from None
        rates = (
            "transient_rate",
            "throttle_rate",
            "permanent_failure_rate",
            "lost_rate",
            "slow_rate",
        )
        for name in rates:
            if not 0 <= options[name] <= 1:
                raise CommandError(f"--{name.replace('_', '-')} must be between 0 and 1")
        for name in ("outage_seconds", "job_retention", "max_result_bytes"):
            if not options[name] >= 0:
                raise CommandError(f"--{name.replace('_', '-')} must be 0 or more")
        config = SandboxConfig(
            latency_min=min(latency),
            latency_max=max(latency),
            throttle_retry_after=options["throttle_retry_after"],
            slow_seconds=options["slow_seconds"],
            poll_retry_after=options["poll_retry_after"],
            submit_rate_limit=options["submit_rate_limit"],
            poll_rate_limit=options["poll_rate_limit"],
            api_key=os.environ.get("SANDBOX_API_KEY", ""),
            seed=options["seed"],
            job_retention=options["job_retention"],
            max_result_bytes=options["max_result_bytes"],
            **{name: options[name] for name in rates},
        )
        server = SandboxServer((options["host"], options["port"]), config)
        server.state.outage(options["outage_seconds"])
        self.stdout.write(f"Sandbox extractor listening on {server.url}", ending="\n")
        self.stdout.flush()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
