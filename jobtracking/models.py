import json
from collections.abc import Collection
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Cast, Coalesce, Right
from django.utils import timezone

from extraction.errors import ErrorCode
from extraction.models import Extractor
from extraction.urlsafety import UnsafeURLError, check_public_url
from jobtracking import states
from jobtracking.infra.ids import uuid7


def status_in(statuses: Collection[str]) -> Q:
    """Jobs in one of `statuses` (a set `states` derives): written the same way in every query,
    index and constraint, so a query whose condition is an index's, or a subset of it, uses it."""
    return Q(status__in=sorted(statuses))


# The active jobs: the condition of the partial indexes and of the one-active-job-per-file
# constraint below. Their migration holds its literal list; a new active status changes it, and
# `makemigrations` rebuilds them over the new set (docs/architecture.md, Lifecycle).
ACTIVE_STATUS = status_in(states.ACTIVE)
# The jobs the dispatcher works on when they are due: the condition of the due-work indexes.
DISPATCHED_STATUS = status_in(states.DISPATCHED)
# The end of a job's UUID, as staff see it in lists (the random part: unique in practice, where a
# UUIDv7's start is shared by jobs created in the same millisecond). Indexed by expression.
SHORT_ID = Right(Cast("id", models.CharField()), 12)
# Who asked for a job, as the dispatcher's fair share sees it: jobs created by the system (no
# user) share one queue, user 0.
REQUESTER_KEY = Coalesce("requested_by", models.Value(0), output_field=models.BigIntegerField())
# When a job's current attempt began: its creation, or its latest requeue. Turnaround and waiting
# time count from here, so a requeued job's do not include the time it spent ended (the same rule
# as `ExtractionJob.attempt_started_at`, for queries).
ATTEMPT_STARTED_AT = Coalesce("requeued_at", "created_at")
# The jobs whose result another job may reuse (`services.reuse`): succeeded by an extractor (a
# reused result is not passed on: its window counts from the extraction), with a known digest.
# The condition of the index that finds them; a query must state it whole to use it.
REUSE_SOURCE = Q(status=states.SUCCEEDED, reused_from_job__isnull=True) & ~Q(file_sha256="")
TURNAROUND = models.ExpressionWrapper(
    models.F("completed_at") - ATTEMPT_STARTED_AT, output_field=models.DurationField()
)


class JobStatus(models.Model):
    """Reference table of the lifecycle's statuses: one row per declaration in `states.STATUSES`,
    each inserted by a data migration as it was when that status was added."""

    code = models.CharField(max_length=20, primary_key=True)
    label = models.CharField(max_length=50)
    terminal = models.BooleanField()
    description = models.CharField(max_length=200)
    position = models.PositiveSmallIntegerField(help_text="Order in the lifecycle.")

    class Meta:
        ordering = ["position"]
        verbose_name_plural = "job statuses"

    def __str__(self) -> str:
        return self.code


class FileFactsOrigin(models.TextChoices):
    """Who measured a URL job's content type, size and SHA-256 (an upload's are the service's
    own, taken as it was stored)."""

    EXTRACTOR = "extractor", "Reported by the extractor"
    SERVICE = "service", "Measured by the service as it fetched the URL"


class ActorType(models.TextChoices):
    API = "api", "API"
    ADMIN = "admin", "Admin"
    COMMAND = "command", "Command"
    SYSTEM = "system", "System"


class Priority(models.IntegerChoices):
    """Dispatch order: a lower value goes first (see `jobtracking.priorities`)."""

    INTERACTIVE = 0, "Interactive"
    NORMAL = 1, "Normal"
    BULK = 2, "Bulk"

    @classmethod
    def named(cls, name: str) -> "Priority":
        return cls[name.upper()]

    @classmethod
    def codes(cls) -> list[str]:
        """The names clients and operators use: interactive, normal, bulk."""
        return [priority.code for priority in cls]

    @property
    def code(self) -> str:
        return self.name.lower()


class Batch(models.Model):
    """The files of one grant request, tracked as one unit. Its aggregate (counts by status,
    progress, its status) is computed from its jobs (`selectors.batch_summary`), never kept in
    this row: a job's transition never writes or waits on it. The row changes only when the
    batch does: closed, cancelled, completed (`services.batches`)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="extraction_batches",
        db_index=False,
    )
    # NULL, not "", for "none": the per-client unique constraint skips NULLs.
    client_reference = models.CharField(  # noqa: DJ001
        max_length=255,
        null=True,
        blank=True,
        help_text="The client's id for it (unique per client).",
    )
    metadata = models.JSONField(default=dict, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    request_fingerprint = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(
        null=True, blank=True, help_text="From then on it takes no more jobs."
    )
    cancelled_at = models.DateTimeField(null=True, blank=True)
    # Set once per completion by the one statement that publishes `batch.completed`
    # (`services.batch_completion`); cleared when a job of it runs again.
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "batches"
        constraints = [
            models.UniqueConstraint(
                fields=["requested_by", "client_reference"],
                condition=Q(client_reference__isnull=False),
                name="batch_reference_per_client",
                violation_error_message="This client already has a batch with this reference.",
            ),
            models.UniqueConstraint(
                fields=["requested_by", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="batch_idempotency_key_per_user",
            ),
        ]
        indexes = [
            models.Index(
                fields=["requested_by", "-created_at"], name="batch_requester_created_idx"
            ),
            models.Index(fields=["-created_at"], name="batch_created_idx"),
            # The safety net's look for closed batches whose completion was not recorded.
            models.Index(
                fields=["closed_at"],
                condition=Q(
                    closed_at__isnull=False, completed_at__isnull=True, cancelled_at__isnull=True
                ),
                name="batch_awaiting_completion_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.client_reference or str(self.id)

    @property
    def is_open(self) -> bool:
        return self.closed_at is None


class ExtractionJob(models.Model):
    """One request to one extractor for one file. Its status changes only through
    `jobtracking.services.transitions` (`jobs_transition`, `job_transition`)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # Composite indexes below lead with these foreign keys, so Django's own FK indexes are off.
    extractor = models.ForeignKey(
        Extractor, on_delete=models.PROTECT, related_name="jobs", db_index=False
    )
    status = models.ForeignKey(
        JobStatus, on_delete=models.PROTECT, related_name="+", db_index=False
    )

    file_id = models.CharField(max_length=255, help_text="The platform's identifier of the file.")
    file_name = models.CharField(max_length=255, blank=True)
    content_type = models.CharField(max_length=100, blank=True)
    file_size = models.BigIntegerField(null=True, blank=True)
    file_sha256 = models.CharField(max_length=64, blank=True)
    # Blank until the extractor or the service has measured them (a client may have declared
    # them); a database default too, for rows written without the ORM.
    file_facts_origin = models.CharField(
        max_length=20, choices=FileFactsOrigin.choices, blank=True, default="", db_default=""
    )
    source_url = models.URLField(max_length=2000, blank=True)
    upload = models.FileField(upload_to="uploads/%Y/%m/%d/", max_length=300, blank=True)

    options = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    # False: the client wants the extractor called even where an identical document's result
    # could be reused (`services.reuse`).
    reuse_result = models.BooleanField(default=True, db_default=True)
    # True for an attempt begun by requeueing a succeeded job (which needs force): it was asked
    # to be extracted again, so it takes no reused result. Each requeue sets it anew.
    extract_afresh = models.BooleanField(default=False, db_default=False)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="extraction_jobs",
        db_index=False,
    )
    priority = models.PositiveSmallIntegerField(choices=Priority.choices, default=Priority.NORMAL)
    # Indexed with the status below (`job_batch_status_idx`).
    batch = models.ForeignKey(
        Batch,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="jobs",
        db_index=False,
    )
    # NULL, not "", for "no key": the per-user unique constraint skips NULLs.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    # SHA-256 of the creating request, to tell a replay from a reuse of the key.
    request_fingerprint = models.CharField(max_length=64, blank=True)
    # The billable pages the service knows before submission (an uploaded PDF's page count, an
    # image's one page); None when unknown. The budget gate counts it (`services.budgets`).
    expected_pages = models.PositiveIntegerField(null=True, blank=True)
    # When the job was last held for its client's budget (status `held`); None otherwise.
    held_since = models.DateTimeField(null=True, blank=True)
    # The W3C trace context of the span that created the job ("" with tracing off): every
    # later step of the job is a span of that trace (`jobtracking.infra.tracing`).
    traceparent = models.CharField(max_length=55, blank=True, default="")

    attempt = models.PositiveIntegerField(default=1)
    submit_attempts = models.PositiveIntegerField(default=0)
    poll_count = models.PositiveIntegerField(default=0)
    poll_error_count = models.PositiveIntegerField(default=0)

    external_job_id = models.CharField(max_length=255, blank=True)
    external_url = models.CharField(max_length=2000, blank=True)
    external_status = models.CharField(max_length=50, blank=True)
    external_request_id = models.CharField(max_length=100, blank=True)
    progress = models.PositiveSmallIntegerField(default=0)
    remote_expires_at = models.DateTimeField(null=True, blank=True)

    due_at = models.DateTimeField(null=True, blank=True)
    # Set when the job is handed to a task; the task clears it, so a duplicate copy of the task
    # (django-q2 delivers at least once) finds nothing to do.
    claimed_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)

    error_code = models.CharField(max_length=50, choices=ErrorCode.choices, blank=True)
    error_message = models.TextField(blank=True)
    # The current attempt's result is a copy of this job's attempt's (`services.reuse`): no
    # extractor was called. The source by id, not by key: purging it keeps this record.
    reused_from_job = models.UUIDField(null=True, blank=True)
    reused_from_attempt = models.PositiveIntegerField(null=True, blank=True)

    created_at = models.DateTimeField(default=timezone.now)
    # The current attempt's start when it is a requeue; empty on the first attempt.
    requeued_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # The hash of the job's last status change: its audit chain's head (`jobtracking.audit`).
    audit_head = models.CharField(
        max_length=64, blank=True, editable=False, default="", db_default=""
    )

    class Meta:
        ordering = ["-created_at"]
        permissions = [
            ("cancel_extractionjob", "Can cancel extraction jobs"),
            ("requeue_extractionjob", "Can requeue extraction jobs"),
            ("view_all_extractionjobs", "Can view every client's extraction jobs"),
            (
                "set_interactive_priority",
                "Can give jobs the interactive priority (dispatched before everyone else's)",
            ),
            (
                "manage_all_extractionjobs",
                "Can cancel and requeue every client's extraction jobs (with the action's own "
                "permission)",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["extractor", "file_id"],
                condition=ACTIVE_STATUS,
                name="job_one_active_per_file",
                violation_error_message="An active job already exists for this file.",
            ),
            models.UniqueConstraint(
                fields=["requested_by", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="job_idempotency_key_per_user",
            ),
            models.CheckConstraint(
                condition=(Q(source_url="") & ~Q(upload="")) | (~Q(source_url="") & Q(upload="")),
                name="job_exactly_one_source",
                violation_error_message="A job needs exactly one of source_url and upload.",
            ),
            models.CheckConstraint(
                condition=Q(progress__gte=0, progress__lte=100), name="job_progress_range"
            ),
            models.CheckConstraint(condition=Q(attempt__gte=1), name="job_attempt_positive"),
        ]
        indexes = [
            # Finding due work costs O(due jobs): only the rows of jobs the dispatcher works on
            # (`states.DISPATCHED`: active, not waiting for a person) are in this index.
            models.Index(fields=["due_at"], condition=DISPATCHED_STATUS, name="job_due_active_idx"),
            # The dispatcher walks due work by priority and requester (see `dispatcher.py`).
            models.Index(
                "priority",
                REQUESTER_KEY,
                "due_at",
                condition=DISPATCHED_STATUS,
                name="job_due_fair_idx",
            ),
            # The in-flight cap counts an extractor's active jobs by status and priority, and
            # asks which priorities have jobs pending.
            models.Index(
                fields=["extractor", "status", "priority"],
                condition=ACTIVE_STATUS,
                name="job_active_idx",
            ),
            models.Index(fields=["status", "-created_at"], name="job_status_created_idx"),
            models.Index(fields=["extractor", "-created_at"], name="job_extractor_created_idx"),
            models.Index(fields=["-created_at"], name="job_created_idx"),
            models.Index(fields=["-completed_at"], name="job_completed_idx"),
            models.Index(fields=["error_code", "-created_at"], name="job_error_created_idx"),
            models.Index(fields=["file_id"], name="job_file_id_idx"),
            # Prefix search on file names (LIKE 'abc%') needs the pattern operator class.
            models.Index(
                fields=["file_name"], opclasses=["varchar_pattern_ops"], name="job_file_name_idx"
            ),
            models.Index(fields=["external_job_id"], name="job_external_id_idx"),
            models.Index(SHORT_ID, name="job_short_id_idx"),
            models.Index(fields=["requested_by", "-created_at"], name="job_requester_created_idx"),
            # A reused result's source (`services.reuse`): one client's extracted (not reused)
            # successes by extractor and document, newest last. Only those are in it, so a job
            # that never succeeds, or has no digest, costs it nothing.
            models.Index(
                fields=["requested_by", "extractor", "file_sha256", "completed_at"],
                condition=REUSE_SOURCE,
                name="job_reuse_source_idx",
            ),
            # A reused result's twins in flight (`services.reuse`): one client's active jobs by
            # extractor and document. Only active jobs with a digest are in it.
            models.Index(
                fields=["requested_by", "extractor", "file_sha256"],
                condition=ACTIVE_STATUS & ~Q(file_sha256=""),
                name="job_active_document_idx",
            ),
            # A batch's aggregate, from the index alone (an index-only scan of its entries):
            # counts by status, first and last moments, failures by error code. Only jobs of
            # a batch are in it, so other jobs pay nothing for it.
            models.Index(
                fields=["batch", "status"],
                include=["id", "created_at", "completed_at", "error_code"],
                condition=Q(batch__isnull=False),
                name="job_batch_status_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.status_id})"

    @property
    def is_terminal(self) -> bool:
        return self.status_id in states.TERMINAL

    @property
    def attempt_started_at(self):
        """When the current attempt began (`ATTEMPT_STARTED_AT` in a query)."""
        return self.requeued_at or self.created_at

    @property
    def turnaround(self):
        """From the current attempt's start to its end (`TURNAROUND` in a query); None while the
        job is active."""
        return self.completed_at - self.attempt_started_at if self.completed_at else None


class AppendOnlyError(Exception):
    """Raised when code tries to rewrite or delete an audit row."""


class JobStatusChange(models.Model):
    """The audit trail: one row per change of a job's status, never updated or deleted."""

    job = models.ForeignKey(
        ExtractionJob, on_delete=models.CASCADE, related_name="status_changes", db_index=False
    )
    # Not indexed: nothing looks changes up by the status they left (and each index is one more
    # write per change).
    from_status = models.ForeignKey(
        JobStatus,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    to_status = models.ForeignKey(
        JobStatus, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    attempt = models.PositiveIntegerField()
    changed_at = models.DateTimeField(default=timezone.now)
    actor_type = models.CharField(max_length=10, choices=ActorType.choices)
    # PROTECT, not SET_NULL: the actor is part of the hashed content, so a user who acted on a
    # job is deactivated rather than deleted (which would rewrite the history).
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    reason = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)
    # The job's hash chain (`jobtracking.audit`, docs/audit.md): SHA-256 of the canonical text,
    # which names the previous row's hash.
    # (Empty by default, so that a writer that bypasses the state machine leaves a row that
    # verify_audit reports, rather than failing.)
    prev_hash = models.CharField(max_length=64, editable=False, default="", db_default="")
    hash = models.CharField(max_length=64, editable=False, default="", db_default="")

    class Meta:
        ordering = ["changed_at", "id"]
        indexes = [
            models.Index(fields=["job", "changed_at"], name="change_job_time_idx"),
            models.Index(fields=["-changed_at"], name="change_time_idx"),
            models.Index(fields=["to_status", "-changed_at"], name="change_status_time_idx"),
            models.Index(fields=["actor_type", "-changed_at"], name="change_actor_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_status_id or '∅'} → {self.to_status_id}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise AppendOnlyError("Status changes are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("Status changes are append-only.")


class AuditCheckpoint(models.Model):
    """A signed commitment to the heads of the audit chains that moved up to `upto`
    (docs/audit.md). `statement` is the canonical text the signature covers, kept as signed;
    `leaves` are the `[job id, creation day, head]` its Merkle root is computed over."""

    number = models.PositiveIntegerField(primary_key=True)
    created_at = models.DateTimeField()
    upto = models.DateTimeField()
    statement = models.TextField()
    signature = models.CharField(max_length=128)
    key_id = models.CharField(max_length=16)
    leaves = models.JSONField(default=list)

    class Meta:
        ordering = ["number"]

    def __str__(self) -> str:
        return f"checkpoint {self.number} up to {self.upto:%Y-%m-%d %H:%M:%S}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise AppendOnlyError("Checkpoints are append-only.")
        super().save(*args, **kwargs)


class ExtractionResult(models.Model):
    """The extractor's output for one successful attempt: inline JSON when small, else a file."""

    job = models.ForeignKey(
        ExtractionJob, on_delete=models.CASCADE, related_name="results", db_index=False
    )
    attempt = models.PositiveIntegerField()
    payload = models.JSONField(null=True, blank=True)
    payload_file = models.FileField(upload_to="results/%Y/%m/%d/", max_length=300, blank=True)
    content_sha256 = models.CharField(max_length=64)
    size_bytes = models.BigIntegerField()
    page_count = models.PositiveIntegerField(null=True, blank=True)
    model_version = models.CharField(max_length=200, blank=True)
    received_at = models.DateTimeField(default=timezone.now)
    # When the extractor's JSON held what cannot be stored (`jobtracking.infra.storable`): what
    # was changed in `payload`, and the answer's bytes as sent, with their digest.
    made_safe = models.JSONField(default=list, blank=True)
    original_file = models.FileField(
        upload_to="results/originals/%Y/%m/%d/", max_length=300, blank=True
    )
    original_sha256 = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["job", "-attempt"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt"], name="result_one_per_attempt"),
            models.CheckConstraint(
                condition=Q(payload__isnull=False) | ~Q(payload_file=""),
                name="result_has_payload",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} attempt {self.attempt}"

    def load_payload(self) -> Any:
        """The extractor's JSON, from the row or from its file (read once per instance: the
        API's answer reads it for `payload` and for `document`)."""
        if self.payload is not None:
            return self.payload
        if not hasattr(self, "_payload_from_file"):
            with self.payload_file.open("rb") as stored:
                self._payload_from_file = json.load(stored)
        return self._payload_from_file


class JobEvent(models.Model):
    """Transactional outbox: written in the same transaction as the change it describes.
    The auto-increment id is the pull feed's cursor. An event is about one job or about one
    batch (`batch.*` types), is a signed audit checkpoint (about neither), or is about a
    client's usage (`requested_by`)."""

    id = models.BigAutoField(primary_key=True)
    event_id = models.UUIDField(default=uuid7, unique=True, editable=False)
    job = models.ForeignKey(
        ExtractionJob,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="events",
        db_index=False,
    )
    batch = models.ForeignKey(
        Batch,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="events",
        db_index=False,
    )
    # Whose event it is when it is of neither a job nor a batch (`usage.threshold_reached`).
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    type = models.CharField(max_length=30, choices=[(t, t) for t in states.OUTBOX_EVENT_TYPES])
    payload = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["type", "id"], name="event_type_id_idx"),
            models.Index(fields=["job", "id"], name="event_job_id_idx"),
            models.Index(
                fields=["batch", "id"],
                condition=Q(batch__isnull=False),
                name="event_batch_id_idx",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(job__isnull=False, batch__isnull=True)
                | Q(job__isnull=True, batch__isnull=False)
                | Q(job__isnull=True, batch__isnull=True, type=states.AUDIT_CHECKPOINT)
                | Q(
                    job__isnull=True,
                    batch__isnull=True,
                    requested_by__isnull=False,
                    type=states.USAGE_THRESHOLD_REACHED,
                ),
                name="event_of_a_job_or_a_batch",
            )
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.type} {self.job_id or self.batch_id}"


EVENT_TYPES_CHOICE = (
    "Choose the event types to receive, or all event types (all_event_types: every type, "
    "including ones added later), not both."
)


class WebhookSubscription(models.Model):
    """A receiver of job events. Its signing secret is derived from the server's key and
    `secret_version` (see `jobtracking.events`), so no secret is stored in the database."""

    url = models.URLField(max_length=2000)
    description = models.CharField(max_length=200, blank=True)
    # Either every type, chosen explicitly (types added later too), or the listed ones: an
    # empty list means nothing, so a new type never reaches a receiver that did not ask for it.
    event_types = models.JSONField(
        default=list, blank=True, help_text="The event types to receive (unless all of them)."
    )
    all_event_types = models.BooleanField(
        default=False, help_text="Receive every event type, including ones added later."
    )
    active = models.BooleanField(default=True)
    all_jobs = models.BooleanField(
        default=False,
        help_text="Receive the events of every client's jobs (needs the view-all permission). "
        "Otherwise only those of the jobs its owner requested.",
    )
    secret_version = models.PositiveIntegerField(default=1)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # When the secret was last rotated: the previous one signs too for a grace period
    # (`WEBHOOK_SECRET_GRACE_HOURS`, `webhooks.sending.subscription_secrets`).
    secret_rotated_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(all_event_types=True, event_types=[])
                | (Q(all_event_types=False) & ~Q(event_types=[])),
                name="subscription_all_or_listed_event_types",
                violation_error_message=EVENT_TYPES_CHOICE,
            )
        ]

    def __str__(self) -> str:
        return self.url

    def clean(self) -> None:
        try:
            check_public_url(self.url)
        except UnsafeURLError as error:
            raise ValidationError({"url": error.message}) from None
        unknown = set(self.event_types or []) - set(states.OUTBOX_EVENT_TYPES)
        if unknown:
            raise ValidationError({"event_types": f"Unknown event types: {sorted(unknown)}"})
        if bool(self.event_types) == self.all_event_types:
            raise ValidationError({"event_types": EVENT_TYPES_CHOICE})


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    DEAD = "dead", "Dead"


class WebhookDelivery(models.Model):
    """One event on its way to one subscription, delivered at least once."""

    event = models.ForeignKey(
        JobEvent, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    # Indexed below by `delivery_sub_created_idx`, which leads with it.
    subscription = models.ForeignKey(
        WebhookSubscription, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    state = models.CharField(
        max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # Set by a sender that claimed the delivery, until its lease ends. Not indexed, unlike
    # `next_attempt_at`: on PostgreSQL a claim is then a heap-only update that adds no index
    # entry (the table keeps room in its pages for it, migration 0019).
    claimed_until = models.DateTimeField(null=True, blank=True, editable=False)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_response_excerpt = models.TextField(blank=True)
    first_failed_at = models.DateTimeField(
        null=True, blank=True, help_text="Retries stop a day or so after this."
    )
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["event", "subscription"], name="delivery_one_per_event_subscription"
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(state="pending"),
                name="delivery_due_idx",
            ),
            # The admin's changelist (newest first, by state or receiver) and an endpoint's
            # deliveries in the API: each page an index range, however many are stored.
            models.Index(fields=["state", "-created_at"], name="delivery_state_created_idx"),
            models.Index(fields=["-created_at"], name="delivery_created_idx"),
            models.Index(fields=["subscription", "-created_at"], name="delivery_sub_created_idx"),
            # The admin's search by a failing status: only undelivered rows can have one.
            models.Index(
                fields=["last_status_code", "-created_at"],
                condition=~Q(state="delivered"),
                name="delivery_failing_status_idx",
            ),
        ]

    def __str__(self) -> str:
        """What a delivery's page is titled: its event and receiver, as staff know them."""
        return f"{self.event.type} event {self.event_id} to {self.subscription.url} ({self.state})"


class DeliveryAttempt(models.Model):
    """One POST of a delivery and how it went, never updated or deleted (but with its
    delivery). Written with the attempt's outcome (`services.deliveries`)."""

    delivery = models.ForeignKey(
        WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log", db_index=False
    )
    attempted_at = models.DateTimeField(default=timezone.now)
    status_code = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="The receiver's HTTP status; empty: no answer."
    )
    error = models.TextField(blank=True, help_text="What failed, with its cause and host.")
    response_excerpt = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(help_text="From the POST to its answer or failure.")

    class Meta:
        ordering = ["attempted_at", "id"]
        indexes = [models.Index(fields=["delivery", "attempted_at"], name="attempt_delivery_idx")]

    def __str__(self) -> str:
        return f"delivery {self.delivery_id} at {self.attempted_at:%Y-%m-%d %H:%M:%S}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise AppendOnlyError("Delivery attempts are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("Delivery attempts are append-only.")


class ServiceHeartbeat(models.Model):
    """The last sign of life of a long-running process (dispatcher, worker cluster)."""

    name = models.CharField(max_length=200, primary_key=True)
    kind = models.CharField(max_length=20)
    beat_at = models.DateTimeField()
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [models.Index(fields=["kind", "-beat_at"], name="heartbeat_kind_idx")]

    def __str__(self) -> str:
        return self.name


class ApiToken(models.Model):
    """A service account's API token. Only its SHA-256 is stored: the key itself is shown once,
    when `create_api_token` issues it."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(
        max_length=8, help_text="The key's first characters, to tell keys apart."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Refused from then on; empty: until revoked."
    )

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


class RateSlot(models.Model):
    """When the next call of one kind to one extractor may go out: the shared state of its rate
    limit (see `jobtracking.services.engine.reserve_slots`)."""

    SUBMIT = "submit"
    POLL = "poll"
    # Each kind's rate is split in two lanes (see `jobtracking.priorities.submit_lanes`).
    SHARED = "shared"
    RESERVED = "reserved"

    extractor = models.ForeignKey(Extractor, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=10, choices=[(SUBMIT, "Submit"), (POLL, "Poll")])
    lane = models.CharField(
        max_length=10, choices=[(SHARED, "Shared"), (RESERVED, "Reserved")], default=SHARED
    )
    next_free_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["extractor", "kind", "lane"], name="rate_slot_per_kind_lane"
            )
        ]

    def __str__(self) -> str:
        return f"{self.extractor_id} {self.kind} {self.lane}"


class CircuitState(models.TextChoices):
    CLOSED = "closed", "Working"
    OPEN = "open", "Failing: probes only"
    PAUSED = "paused", "Paused by staff"


class Circuit(models.Model):
    """A dependency's health, shared by every worker on every machine (see
    `jobtracking.services.circuits`). Closed: calls go out. Open: it failed as a whole, so only a
    probe goes out, at `probe_at`. Paused: staff stopped calls by hand."""

    state = models.CharField(
        max_length=10, choices=CircuitState.choices, default=CircuitState.CLOSED
    )
    since = models.DateTimeField(default=timezone.now, help_text="When the state began.")
    failures = models.PositiveIntegerField(
        default=0,
        help_text="Transient failures in a row, of different origins (jobs, clients' sources, "
        "events), with no success between them.",
    )
    # Whose calls failed since the last success: one origin failing again and again is a fault
    # of that origin (a job, a client's source), not an outage.
    failed_origins = models.JSONField(default=list, blank=True)
    probes = models.PositiveIntegerField(default=0, help_text="Probes sent since it opened.")
    probe_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Open: when the next probe may go. Paused: when held work looks again. Held "
        "work is due then.",
    )
    last_error = models.CharField(max_length=500, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=500, blank=True, help_text="Why staff paused it.")

    class Meta:
        abstract = True

    @property
    def holding(self) -> bool:
        return self.state != CircuitState.CLOSED


class ExtractorHealth(Circuit):
    extractor = models.OneToOneField(
        Extractor, on_delete=models.CASCADE, primary_key=True, related_name="health"
    )

    class Meta:
        verbose_name_plural = "extractor health"
        permissions = [("pause_extractor", "Can pause and resume calls to an extractor")]

    def __str__(self) -> str:
        return f"{self.extractor_id}: {self.state}"


class ReceiverHealth(Circuit):
    subscription = models.OneToOneField(
        WebhookSubscription, on_delete=models.CASCADE, primary_key=True, related_name="health"
    )

    class Meta:
        verbose_name_plural = "receiver health"

    def __str__(self) -> str:
        return f"{self.subscription_id}: {self.state}"


class ArchivedJob(models.Model):
    """Where a purged job's record is: written in the transaction that deletes the job, after the
    archive's manifest confirmed the file (`jobtracking.services.archive`). So a purged job stays
    findable by its id or its file, and its record can be read back."""

    job_id = models.UUIDField(primary_key=True)
    file_id = models.CharField(max_length=255)
    external_job_id = models.CharField(max_length=255, blank=True)
    # Kept so that the one scoping rule (`selectors.visible`) applies to purged jobs too.
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    status = models.CharField(max_length=20)
    created_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    archived_at = models.DateTimeField()
    storage = models.CharField(max_length=50, help_text="The name of the Django storage.")
    path = models.CharField(max_length=500, help_text="The archive file, in that storage.")
    line = models.PositiveIntegerField(help_text="The record's line in the file (from 0).")
    offset = models.BigIntegerField(help_text="Where the record's gzip member starts (bytes).")
    manifest = models.CharField(max_length=500, help_text="The manifest that confirmed the file.")

    class Meta:
        permissions = [
            ("download_archived_job", "Can download the archived record of a purged job"),
        ]
        indexes = [
            models.Index(fields=["file_id"], name="archived_file_id_idx"),
            models.Index(fields=["external_job_id"], name="archived_external_id_idx"),
            models.Index(fields=["requested_by", "archived_at"], name="archived_requester_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} (archived {self.archived_at:%Y-%m-%d})"


class UsagePrice(models.Model):
    """What an extractor's pages cost from a day on: for one of its models, or (model blank)
    for every model without a price of its own. Usage is priced at the price in force on its
    day, so a new row changes the cost of usage from its `effective_from` on and never before."""

    extractor = models.ForeignKey(Extractor, on_delete=models.PROTECT, related_name="+")
    model_id = models.CharField(
        max_length=200, blank=True, help_text="The extractor's model; blank for all its models."
    )
    effective_from = models.DateField(help_text="The first day (UTC) this price applies to.")
    price_per_1000_pages = models.DecimalField(max_digits=12, decimal_places=4)
    currency = models.CharField(max_length=3, default="USD", help_text="ISO 4217, e.g. USD.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["extractor", "model_id", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["extractor", "model_id", "effective_from"], name="usage_price_per_day"
            ),
            models.CheckConstraint(
                condition=Q(price_per_1000_pages__gte=0), name="usage_price_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(currency__regex=r"^[A-Z]{3}$"), name="usage_price_currency_code"
            ),
        ]

    def __str__(self) -> str:
        model = self.model_id or "all models"
        return (
            f"{self.extractor_id} {model} from {self.effective_from}: "
            f"{self.price_per_1000_pages} {self.currency}/1000 pages"
        )


class UsageCountedBy(models.TextChoices):
    RESULT = "result", "The result's pages"
    EXTRACTOR = "extractor", "The extractor's word"
    RULE = "rule", "No word: our rule (0 pages)"
    REUSED = "reused", "A reused result (0 pages; its source's pages saved)"


# An attempt the extractor billed (1) or a reused result, which no extractor saw (0): summed,
# the usage's "jobs", by the rollup and by the readers of rows not yet rolled up alike.
BILLED_ATTEMPT = models.Case(
    models.When(counted_by=UsageCountedBy.REUSED, then=models.Value(0)),
    default=models.Value(1),
    output_field=models.IntegerField(),
)


class UsageRecord(models.Model):
    """The billable pages of one attempt that reached an extractor, written by the state machine
    in the transaction that ends the attempt (append-only). It names the job by id and nothing
    more, so that purging a job's history keeps what it cost. Rows not yet in `UsageDaily` are
    `rolled_up=False` (a partial index keeps finding them O(new rows))."""

    job_id = models.UUIDField()
    attempt = models.PositiveIntegerField()
    client = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    extractor = models.ForeignKey(
        Extractor, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    model_id = models.CharField(max_length=200, blank=True)
    outcome = models.CharField(max_length=20)  # the status that ended the attempt
    pages = models.PositiveIntegerField()
    # A reused result's: the pages its source was billed, which this attempt did not cost.
    pages_saved = models.PositiveIntegerField(default=0, db_default=0)
    counted_by = models.CharField(max_length=10, choices=UsageCountedBy.choices)
    recorded_at = models.DateTimeField()
    day = models.DateField()  # recorded_at's UTC day: the rollup's and the price's key
    rolled_up = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job_id", "attempt"], name="usage_one_per_attempt")
        ]
        indexes = [
            models.Index(
                fields=["day"], condition=Q(rolled_up=False), name="usage_record_unrolled_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} attempt {self.attempt}: {self.pages} pages"


class UsageSums(models.Model):
    """Usage summed per period (its first day), client, extractor and model, from `UsageRecord`
    rows by the rollup schedule (`services.usage.usage_roll_up`): the only writer, a few times a
    minute at most, so no engine transaction ever waits on one of these rows. `client_key` is
    the requester's id, 0 for jobs without one (a constraint on a nullable column would never
    match them)."""

    day = models.DateField()
    client_key = models.BigIntegerField()
    extractor = models.ForeignKey(
        Extractor, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    model_id = models.CharField(max_length=200, blank=True)
    pages = models.BigIntegerField(default=0)
    pages_saved = models.BigIntegerField(default=0, db_default=0)
    attempts = models.BigIntegerField(default=0)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.day} client {self.client_key} {self.extractor_id}: {self.pages} pages"


class UsageDaily(UsageSums):
    """Usage per UTC day."""

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["day", "client_key", "extractor", "model_id"], name="usage_daily_key"
            )
        ]


class UsageMonthly(UsageSums):
    """Usage per month (`day`: its first day), written with the daily sums: a whole month's
    summary reads a row per client, extractor and model rather than one per day."""

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["day", "client_key", "extractor", "model_id"], name="usage_monthly_key"
            )
        ]


class WhenUsedUp(models.TextChoices):
    HOLD = "hold", "Hold new and pending jobs until there is room"
    REFUSE = "refuse", "Refuse new jobs at creation (403 budget_exhausted)"


class UsageBudget(models.Model):
    """A client's monthly budget in pages, for all its extractors or (with `extractor`) for one.
    The budget gate (`services.budgets`) submits a job only while the month's pages used, those
    of the client's jobs in flight and its own fit within every budget that covers it."""

    client = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="usage_budgets"
    )
    extractor = models.ForeignKey(
        Extractor,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        help_text="Blank: the client's jobs on every extractor.",
    )
    pages = models.PositiveBigIntegerField(help_text="Billable pages a calendar month (UTC).")
    threshold_percent = models.PositiveSmallIntegerField(
        default=80,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="A usage.threshold_reached event goes out when the month's usage reaches it.",
    )
    when_used_up = models.CharField(max_length=10, choices=WhenUsedUp.choices, default="hold")
    # The first day of the month whose threshold event went out (one a month).
    threshold_sent_for = models.DateField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["client", "extractor"],
                condition=Q(extractor__isnull=False),
                name="budget_one_per_client_extractor",
                violation_error_message="The client has a budget for this extractor already.",
            ),
            models.UniqueConstraint(
                fields=["client"],
                condition=Q(extractor__isnull=True),
                name="budget_one_per_client",
                violation_error_message="The client has a budget for every extractor already.",
            ),
        ]

    def __str__(self) -> str:
        scope = self.extractor.slug if self.extractor_id else "every extractor"
        return f"{self.client} on {scope}: {self.pages} pages a month"
