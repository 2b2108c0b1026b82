import datetime
import time
import uuid

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_date, parse_datetime

from jobtracking.infra.signing import SigningKeyError, public_key_bytes
from jobtracking.models import AuditCheckpoint
from jobtracking.services.audit_verification import audit_verify


def moment(value: str) -> datetime.datetime:
    """An ISO date (midnight UTC) or date and time (UTC unless it says otherwise)."""
    parsed = parse_datetime(value) or (
        datetime.datetime.combine(day, datetime.time()) if (day := parse_date(value)) else None
    )
    if parsed is None:
        raise ValueError(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


class Command(BaseCommand):
    help = (
        "Walk the audit hash chains and the signed checkpoints (docs/audit.md); report the first "
        "broken link with what was expected there, and exit 1 if there is one. The checkpoints' "
        "public key comes from AUDIT_PUBLIC_KEY (or is derived from AUDIT_SIGNING_KEY)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--since",
            type=moment,
            help="Only the chains that moved since this date or time, and later checkpoints.",
        )
        parser.add_argument(
            "--job", type=uuid.UUID, action="append", dest="jobs", help="Only this job's chain."
        )

    def handle(self, *args, since=None, jobs=None, **options):
        try:
            public_key = public_key_bytes()
        except SigningKeyError as error:
            if AuditCheckpoint.objects.exists():
                raise CommandError(f"{error} The checkpoints cannot be verified.") from None
            public_key = b""
        started = time.monotonic()
        result = audit_verify(public_key=public_key, since=since, job_ids=jobs)
        seconds = time.monotonic() - started
        if result.broken:
            raise CommandError(f"Broken link: {result.broken}.", returncode=1)
        self.stdout.write(
            f"Verified {result.rows} change(s) in {result.chains} chain(s) and "
            f"{result.checkpoints} checkpoint(s) in {seconds:.1f} s: no broken link."
        )
        if result.unchained:
            self.stdout.write(
                f"{result.unchained} change(s) predate the hash chain and were not verified."
            )
