import datetime
import hashlib
import json
import mimetypes
import threading
from typing import Any

from django.conf import settings
from django.core.validators import ProhibitNullCharactersValidator
from django.db import models
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.utils import json as strict_json
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from extraction.clients.base import client_text
from extraction.errors import ErrorCode
from extraction.models import Extractor
from extraction.registry import result_document
from extraction.results import MAX_COLUMNS, MAX_PAIRS, MAX_ROWS, MAX_TABLES
from extraction.urlsafety import UnsafeURLError, check_public_url
from jobtracking import batch_states
from jobtracking.api.messages import BODY_NOT_AN_OBJECT, plain_field
from jobtracking.infra.recent import Recent
from jobtracking.infra.storable import json_problem, text_problem
from jobtracking.models import (
    CircuitState,
    ExtractionJob,
    ExtractionResult,
    ExtractorHealth,
    JobEvent,
    JobStatus,
    JobStatusChange,
    Priority,
)
from jobtracking.representation import (
    DATETIME_FIELDS,
    FILE_FACTS_ORIGINS,
    JobRepresentation,
    jobs_path,
)
from jobtracking.services.creation import NewJob

# Output


class ErrorSerializer(serializers.Serializer):
    code = serializers.ChoiceField(
        choices=ErrorCode.choices, help_text="Why the job ended without its result."
    )
    message = serializers.CharField()
    requeue_may_help = serializers.BooleanField(
        help_text="Whether submitting the same input again may succeed (the extractor was "
        "unavailable, the job ran out of time…); false when it would fail the same way (the "
        "extractor refused the request or could not extract the document)."
    )


class FileFactsSerializer(serializers.Serializer):
    origin = serializers.ChoiceField(
        choices=FILE_FACTS_ORIGINS,
        allow_null=True,
        help_text="Who measured `content_type`, `file_size` and `file_sha256`: `upload` (the "
        "service, as the upload was stored), `service` (the service, as it fetched the URL for "
        "an extractor that does not report the document, and sent it those bytes), "
        "`extractor` (as it reported the document it fetched), `client` (declared, not "
        "checked); null while nobody has.",
    )
    note = serializers.CharField(help_text="The same in a sentence, or why they are not known.")


class ReusedFromSerializer(serializers.Serializer):
    job = serializers.UUIDField(help_text="The job whose result was copied.")
    attempt = serializers.IntegerField(help_text="Its attempt that produced the result.")
    link = serializers.URLField()


class DurationsSerializer(serializers.Serializer):
    waiting_seconds = serializers.FloatField(
        allow_null=True,
        help_text="From the current attempt's start (creation or latest requeue) to "
        "acceptance by the extractor.",
    )
    processing_seconds = serializers.FloatField(
        allow_null=True, help_text="From acceptance to completion."
    )
    turnaround_seconds = serializers.FloatField(
        allow_null=True,
        help_text="From the current attempt's start (creation or latest requeue) to completion.",
    )


class LinksSerializer(serializers.Serializer):
    self = serializers.CharField()
    history = serializers.CharField()
    result = serializers.CharField()
    cancel = serializers.CharField()
    requeue = serializers.CharField()
    batch = serializers.CharField(allow_null=True, help_text="Its batch's; null if none.")


class PriorityField(serializers.ChoiceField):
    """A priority by name (`interactive`, `normal`, `bulk`); stored as its number."""

    def __init__(self, **kwargs) -> None:
        super().__init__(choices=Priority.codes(), **kwargs)
        self.error_messages["invalid_choice"] = (
            '"{input}" is not a priority: use interactive, normal or bulk.'
        )

    def to_internal_value(self, data) -> Priority:
        return Priority.named(super().to_internal_value(data))

    def to_representation(self, value) -> str:
        return Priority(value).code


PRIORITY_HELP = (
    "interactive (someone is waiting; needs the permission to set it), normal (the default) or "
    "bulk (the default of bulk creates). Higher priorities are dispatched first; lower ones "
    "keep a reserved share."
)


class UtcDateTimeField(serializers.DateTimeField):
    """A moment in UTC with "Z" whatever the current time zone, as events and webhooks write
    it too (`representation.moment`)."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("default_timezone", datetime.UTC)
        super().__init__(**kwargs)


class UtcModelSerializer(serializers.ModelSerializer):
    """A model serializer whose moments are `UtcDateTimeField`s."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.DateTimeField: UtcDateTimeField,
    }


class ExtractionJobSerializer(UtcModelSerializer):
    status = serializers.CharField(source="status_id")
    priority = PriorityField(read_only=True, help_text=PRIORITY_HELP)
    extractor = serializers.CharField(source="extractor.slug")
    requested_by = serializers.CharField(source="requested_by.username", default=None)
    batch = serializers.UUIDField(
        source="batch_id", allow_null=True, help_text="The batch it belongs to; null if none."
    )
    has_upload = serializers.SerializerMethodField()
    file_facts = serializers.SerializerMethodField()
    expected_pages = serializers.IntegerField(
        allow_null=True,
        help_text="The billable pages known before submission (an uploaded PDF's page count, "
        "an image's one page), which a usage budget counts; null when unknown (counted as one).",
    )
    held_since = serializers.DateTimeField(
        allow_null=True,
        help_text="Since when the job is `held` for its client's usage budget; null otherwise.",
    )
    reused_from = serializers.SerializerMethodField()
    error = serializers.SerializerMethodField()
    durations = serializers.SerializerMethodField()
    links = serializers.SerializerMethodField()

    class Meta:
        model = ExtractionJob
        fields = [
            "id",
            "status",
            "priority",
            "extractor",
            "file_id",
            "file_name",
            "content_type",
            "file_size",
            "file_sha256",
            "file_facts",
            "expected_pages",
            "source_url",
            "has_upload",
            "options",
            "metadata",
            "reuse_result",
            "reused_from",
            "requested_by",
            "batch",
            "attempt",
            "submit_attempts",
            "poll_count",
            "progress",
            "external_job_id",
            "external_status",
            "error",
            *DATETIME_FIELDS,
            "durations",
            "links",
        ]

    def to_representation(self, job: ExtractionJob) -> dict[str, Any]:
        """The fields above, written by `jobtracking.representation`, which writes event
        payloads too: DRF would build ~30 field objects per serializer, a third of a create's
        CPU. `test_the_fast_representation_is_drfs_own` pins it to DRF's rendering of the
        declared fields (which also document it in the OpenAPI schema)."""
        return self._representation()(job)

    def _representation(self) -> JobRepresentation:
        """The representation of this response, made once and kept on the root serializer (a
        bulk response represents 500 jobs, whose moments and jobs URL it writes once). Links
        are absolute when the request is known."""
        root = self.root
        if not hasattr(root, "job_representation"):
            request = self.context.get("request")
            jobs_url = request.build_absolute_uri(jobs_path()) if request else None
            root.job_representation = JobRepresentation(jobs_url=jobs_url)
        return root.job_representation

    def get_has_upload(self, job: ExtractionJob) -> bool:
        return JobRepresentation.has_upload(job)

    @extend_schema_field(FileFactsSerializer)
    def get_file_facts(self, job: ExtractionJob) -> dict[str, str | None]:
        return JobRepresentation.file_facts(job)

    @extend_schema_field(ReusedFromSerializer(allow_null=True))
    def get_reused_from(self, job: ExtractionJob) -> dict[str, Any] | None:
        return self._representation().reused_from(job)

    @extend_schema_field(ErrorSerializer(allow_null=True))
    def get_error(self, job: ExtractionJob) -> dict[str, Any] | None:
        return JobRepresentation.error(job)

    @extend_schema_field(DurationsSerializer)
    def get_durations(self, job: ExtractionJob) -> dict[str, float | None]:
        return JobRepresentation.durations(job)

    @extend_schema_field(LinksSerializer)
    def get_links(self, job: ExtractionJob) -> dict[str, str | None]:
        return self._representation().links(str(job.pk), job.batch_id)


class BatchErrorJobSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.CharField()
    file_id = serializers.CharField()
    file_name = serializers.CharField()
    error = ErrorSerializer(allow_null=True, help_text="Null for a job cancelled without one.")
    completed_at = serializers.CharField(allow_null=True)
    link = serializers.CharField()


class BatchFailuresSerializer(serializers.Serializer):
    count = serializers.IntegerField(help_text="Jobs that ended without their result.")
    by_error_code = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Those jobs by error code (a cancelled job without one counts as `cancelled`).",
    )
    jobs = BatchErrorJobSerializer(
        many=True,
        required=False,
        help_text="The first of them in the order they ended (at most 100); only on the "
        "batch's own page.",
    )
    jobs_truncated = serializers.BooleanField(
        required=False, help_text="More failed than listed: page them with links.jobs."
    )


class BatchLinksSerializer(serializers.Serializer):
    self = serializers.CharField()
    jobs = serializers.CharField(help_text="Its jobs: the jobs list filtered by this batch.")
    add_jobs = serializers.CharField()
    close = serializers.CharField()
    cancel = serializers.CharField()
    requeue = serializers.CharField()


class BatchSerializer(serializers.Serializer):
    """A batch as `representation.batch_representation` writes it (the API's answers are
    rendered through these fields, so they never show an undocumented one)."""

    id = serializers.UUIDField()
    client_reference = serializers.CharField(allow_null=True)
    metadata = serializers.DictField()
    requested_by = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(
        choices=batch_states.STATUSES,
        help_text="open: it takes jobs. running: closed, jobs still active. completed: closed, "
        "every job succeeded. completed_with_failures: closed, every job ended, some without "
        "their result. cancelled.",
    )
    total = serializers.IntegerField(help_text="Its jobs.")
    active = serializers.IntegerField(help_text="Its jobs not yet ended.")
    by_status = serializers.DictField(
        child=serializers.IntegerField(), help_text="Its jobs by status (every status)."
    )
    progress = serializers.FloatField(help_text="The share of its jobs that ended, in percent.")
    failures = BatchFailuresSerializer()
    created_at = serializers.CharField()
    closed_at = serializers.CharField(allow_null=True)
    cancelled_at = serializers.CharField(allow_null=True)
    completed_at = serializers.CharField(
        allow_null=True, help_text="When batch.completed was published; null until then."
    )
    first_job_created_at = serializers.CharField(allow_null=True)
    last_job_created_at = serializers.CharField(allow_null=True)
    first_job_completed_at = serializers.CharField(allow_null=True)
    last_job_completed_at = serializers.CharField(allow_null=True)
    links = BatchLinksSerializer()


class JobStatusChangeSerializer(UtcModelSerializer):
    from_status = serializers.CharField(source="from_status_id", allow_null=True)
    to_status = serializers.CharField(source="to_status_id")
    actor = serializers.CharField(source="actor.username", default=None)

    class Meta:
        model = JobStatusChange
        fields = [
            "id",
            "from_status",
            "to_status",
            "attempt",
            "changed_at",
            "actor_type",
            "actor",
            "reason",
            "details",
        ]

    def to_representation(self, change: JobStatusChange) -> dict[str, Any]:
        # The audit row keeps where an extractor call went, for staff; clients get the rest.
        data = super().to_representation(change)
        data["reason"] = client_text(data["reason"])
        if isinstance(data["details"], dict):
            data["details"] = {
                name: client_text(value) if isinstance(value, str) else value
                for name, value in data["details"].items()
            }
        return data


class ResultPageSerializer(serializers.Serializer):
    number = serializers.JSONField(help_text="The page's number, as the extractor gives it.")
    text = serializers.CharField()


class ResultKeyValueSerializer(serializers.Serializer):
    key = serializers.CharField()
    value = serializers.CharField()
    page = serializers.IntegerField(allow_null=True)
    confidence = serializers.FloatField(
        allow_null=True, help_text="From 0 to 1; null where the extractor gives none."
    )


class ResultCellSerializer(serializers.Serializer):
    text = serializers.CharField()
    header = serializers.BooleanField()
    row_span = serializers.IntegerField()
    column_span = serializers.IntegerField()


class ResultTableSerializer(serializers.Serializer):
    page = serializers.IntegerField(allow_null=True)
    caption = serializers.CharField()
    rows = serializers.ListField(
        child=ResultCellSerializer(many=True),
        help_text="Rows of cells as an HTML table lays them out: a cell spanning rows or "
        "columns covers the positions the rows below or the cells beside it leave out.",
    )
    truncated = serializers.BooleanField(
        help_text=f"Rows beyond {MAX_ROWS} or columns beyond {MAX_COLUMNS} were left out."
    )


class ResultDocumentSerializer(serializers.Serializer):
    """A result in the one shape every extractor's result is read into."""

    pages = ResultPageSerializer(many=True)
    key_values = ResultKeyValueSerializer(many=True)
    tables = ResultTableSerializer(many=True)
    more_pairs = serializers.IntegerField(
        help_text=f"Pairs beyond the first {MAX_PAIRS}, left out."
    )
    more_tables = serializers.IntegerField(
        help_text=f"Tables beyond the first {MAX_TABLES}, left out."
    )


class ExtractionResultSerializer(UtcModelSerializer):
    job = serializers.UUIDField(source="job_id")
    payload = serializers.SerializerMethodField()
    document = serializers.SerializerMethodField(
        help_text="The result read into one shape whatever the extractor (pages' text, key/value "
        "pairs, tables with spans); `payload` is the extractor's own format."
    )

    class Meta:
        model = ExtractionResult
        fields = [
            "job",
            "attempt",
            "page_count",
            "model_version",
            "content_sha256",
            "size_bytes",
            "received_at",
            "payload",
            "document",
            "made_safe",
            "original_sha256",
        ]
        extra_kwargs = {
            "made_safe": {
                "help_text": "Where the extractor's JSON held what cannot be stored (a null "
                "character, a lone surrogate, a non-finite number, a number beyond 64 bits) and "
                "how `payload` differs from it there; empty when it is as the extractor sent it."
            },
            "original_sha256": {
                "help_text": "When `made_safe` is not empty: the SHA-256 of the extractor's "
                "answer as sent, whose bytes are kept verbatim."
            },
        }

    @extend_schema_field(serializers.JSONField())
    def get_payload(self, result: ExtractionResult) -> Any:
        return result.load_payload()

    @extend_schema_field(ResultDocumentSerializer)
    def get_document(self, result: ExtractionResult) -> dict[str, Any]:
        adapter = result.job.extractor.adapter
        return result_document(adapter, result.load_payload()).as_dict()


class JobEventSerializer(UtcModelSerializer):
    job = serializers.UUIDField(
        source="job_id", allow_null=True, help_text="The job of a job.* event; null otherwise."
    )
    batch = serializers.UUIDField(
        source="batch_id",
        allow_null=True,
        help_text="The batch of a batch.* event; null otherwise.",
    )
    payload = serializers.SerializerMethodField(
        help_text="The job (job.* events) as GET /api/v1/jobs/{id}/ showed it at the event, or "
        "the batch (batch.* events) as GET /api/v1/batches/{id}/ showed it (without its failed "
        "jobs' list); links as paths (/api/v1/jobs/{id}/) rather than absolute URLs."
    )

    class Meta:
        model = JobEvent
        fields = ["id", "event_id", "type", "job", "batch", "created_at", "payload"]

    @extend_schema_field(
        PolymorphicProxySerializer(
            component_name="EventPayload",
            serializers=[ExtractionJobSerializer, BatchSerializer],
            resource_type_field_name=None,
        )
    )
    def get_payload(self, event: JobEvent) -> dict[str, Any]:
        return event.payload


class ExtractorHealthSerializer(serializers.Serializer):
    state = serializers.ChoiceField(
        choices=CircuitState.choices,
        help_text="closed: calls go out. open: it failed as a whole; jobs wait and only probes "
        "go out. paused: staff stopped calls; jobs wait.",
    )
    since = UtcDateTimeField(
        allow_null=True, help_text="When the state began (null: it has never failed)."
    )
    last_error = serializers.CharField(
        help_text="The last failed call's error (kept after the circuit closes); empty if none."
    )
    next_probe_at = UtcDateTimeField(
        allow_null=True, help_text="Open: when the next probe goes out. Null otherwise."
    )
    paused_reason = serializers.CharField(help_text="Paused: why staff paused it.")


class ExtractorSerializer(UtcModelSerializer):
    health = serializers.SerializerMethodField(
        help_text="Its circuit: whether calls go out now, shared by every worker."
    )
    submit_rate_limit = serializers.SerializerMethodField(
        help_text="Submissions a second across every worker (0: no limit)."
    )
    poll_rate_limit = serializers.SerializerMethodField(
        help_text="Polls and result fetches a second across every worker (0: no limit)."
    )

    class Meta:
        model = Extractor
        # Never the key, nor the name of the variable that holds it.
        fields = [
            "slug",
            "name",
            "adapter",
            "model_id",
            "enabled",
            "max_in_flight",
            "submit_rate_limit",
            "poll_rate_limit",
            "health",
        ]

    @extend_schema_field(ExtractorHealthSerializer)
    def get_health(self, extractor: Extractor) -> dict[str, Any]:
        health = getattr(extractor, "health", None)
        if health is None:  # no row: it never failed (rows are created lazily)
            health = ExtractorHealth(state=CircuitState.CLOSED, since=None)
        return ExtractorHealthSerializer(
            {
                "state": health.state,
                "since": health.since,
                "last_error": client_text(health.last_error),
                "next_probe_at": health.probe_at if health.state == CircuitState.OPEN else None,
                "paused_reason": health.reason,
            }
        ).data

    def get_submit_rate_limit(self, extractor: Extractor) -> float:
        return extractor.rate_limit("submit")

    def get_poll_rate_limit(self, extractor: Extractor) -> float:
        return extractor.rate_limit("poll")


class JobStatusSerializer(UtcModelSerializer):
    class Meta:
        model = JobStatus
        fields = ["code", "label", "terminal", "description"]


class PriorityQueueSerializer(serializers.Serializer):
    active = serializers.IntegerField()
    pending = serializers.IntegerField()
    due = serializers.IntegerField(help_text="Due now and not yet handed to a worker.")
    oldest_due_at = UtcDateTimeField(allow_null=True)
    oldest_due_seconds = serializers.FloatField(
        allow_null=True, help_text="How long the oldest of those has been due."
    )


class StatsSerializer(serializers.Serializer):
    window_hours = serializers.FloatField()
    since = UtcDateTimeField()
    created_by_status = serializers.DictField(child=serializers.IntegerField())
    created_by_extractor = serializers.DictField(
        child=serializers.DictField(child=serializers.IntegerField())
    )
    completed = serializers.IntegerField()
    success_rate = serializers.FloatField(allow_null=True)
    turnaround_seconds = serializers.DictField(child=serializers.FloatField(allow_null=True))
    queue_by_priority = serializers.DictField(
        child=PriorityQueueSerializer(), help_text="Now, whatever the window: by priority."
    )


# Input


def storable_text(value: Any) -> None:
    """`storable`'s rule for text (no NUL, no lone surrogate), as a validator: every field of
    every input serializer has it (`StrictSerializer`); other values pass."""
    if isinstance(value, str) and (problem := text_problem(value)):
        raise serializers.ValidationError(problem)


# DRF's text fields check the same rule in other words: `storable_text` takes their place, so
# that one rule, worded once, judges every field.
DRF_TEXT_CHECKS = (ProhibitNullCharactersValidator, ProhibitSurrogateCharactersValidator)


def storable_field(field: serializers.Field) -> None:
    """Gives `field` (a serializer's own copy), and a list's or dict's items, `storable_text`."""
    if isinstance(field, serializers.BaseSerializer):
        return  # a nested serializer's fields have it (from its own `get_fields`)
    if isinstance(field, serializers.ListField | serializers.DictField):
        storable_field(field.child)
    kept = [check for check in field.validators if not isinstance(check, DRF_TEXT_CHECKS)]
    field.validators = [*kept, storable_text]


@extend_schema_field({"type": "object", "additionalProperties": True})
class JsonObjectField(serializers.JSONField):
    """A JSON object that PostgreSQL and our JSON writers can hold (`storable.json_problem`: a
    value that cannot is refused by its path, `metadata.a.b[2]`), of at most
    `settings.<cap_setting>` bytes, measured as compact JSON in UTF-8; in multipart forms it
    arrives as a JSON string."""

    def __init__(self, *, cap_setting: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cap_setting = cap_setting

    def to_internal_value(self, data):
        if isinstance(data, str):
            try:
                data = strict_json.loads(data)
            except (ValueError, RecursionError):
                raise serializers.ValidationError("Must be valid JSON.") from None
        if not isinstance(data, dict):
            raise serializers.ValidationError("Must be a JSON object.")
        if found := json_problem(data):
            path, why = found
            raise serializers.ValidationError({path: [why]} if path else [why])
        text = strict_json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        cap = getattr(settings, self.cap_setting)
        if len(text.encode("utf-8")) > cap:
            raise serializers.ValidationError(f"Must be at most {cap} bytes as JSON.")
        return data


RECENT_EXTRACTORS = Recent()


def recent_extractor(slug: str) -> Extractor | None:
    return RECENT_EXTRACTORS.get(slug, lambda: Extractor.objects.filter(slug=slug).first())


class ExtractorField(serializers.SlugRelatedField):
    """An extractor by slug, remembered briefly by the process (`jobtracking.infra.recent`); bulk
    requests pass the extractors they name, loaded once, in the context as `extractors`."""

    def to_internal_value(self, data):
        if not isinstance(data, str) or not data:
            raise serializers.ValidationError("Give an extractor's slug.")
        storable_text(data)  # before the lookup: the database cannot even compare such text
        known = self.context.get("extractors", {})
        if data in known:
            return known[data]
        extractor = recent_extractor(data)
        if extractor is None:
            enabled = Extractor.objects.filter(enabled=True).order_by("slug")
            available = ", ".join(enabled.values_list("slug", flat=True)) or "none"
            raise serializers.ValidationError(
                f"No extractor {data!r}. Available: {available} (see GET /api/v1/extractors/)."
            )
        return extractor


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know, by name, instead of ignoring them silently; its fields'
    messages are plain English (`jobtracking.api.messages`), its lists' items named by
    `list_items` ("element" otherwise); every field refuses text that cannot be stored
    (`storable_text`)."""

    default_error_messages = {"invalid": BODY_NOT_AN_OBJECT}
    list_items: dict[str, str] = {}

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        for name, field in fields.items():
            plain_field(field, item=self.list_items.get(name, "element"))
            storable_field(field)
        return fields

    def to_internal_value(self, data):
        if hasattr(data, "keys"):
            unknown = sorted(set(data.keys()) - set(self.fields) - {"csrfmiddlewaretoken"})
            if unknown:
                known = ", ".join(name for name, f in self.fields.items() if not f.read_only)
                raise serializers.ValidationError(
                    {name: [f"Unknown field. This request takes: {known}."] for name in unknown}
                )
        return super().to_internal_value(data)


class DefaultTrueBooleanField(serializers.BooleanField):
    """A boolean whose absence means its default in a form too: DRF's BooleanField reads a
    multipart request (an upload) without the field as false, which would turn a default-on
    setting off for every upload that does not name it."""

    default_empty_html = empty


class ExtractionJobCreateSerializer(StrictSerializer):
    extractor = ExtractorField(
        slug_field="slug", queryset=Extractor.objects.filter(enabled=True).order_by("slug")
    )
    file_id = serializers.CharField(max_length=255)
    file_name = serializers.CharField(max_length=255, required=False, allow_blank=True)
    content_type = serializers.CharField(max_length=100, required=False, allow_blank=True)
    # The column is a bigint.
    file_size = serializers.IntegerField(
        min_value=0, max_value=2**63 - 1, required=False, allow_null=True
    )
    file_sha256 = serializers.RegexField(
        r"^[0-9a-f]{64}$",
        required=False,
        allow_blank=True,
        help_text="Lowercase hex.",
        error_messages={"invalid": "Must be a SHA-256 digest: 64 lowercase hexadecimal digits."},
    )
    source_url = serializers.URLField(max_length=2000, required=False, allow_blank=True)
    file = serializers.FileField(
        source="upload",
        required=False,
        allow_null=True,
        help_text="Multipart upload instead of a URL.",
    )
    # `initial`: the browsable API's form starts from {} (its default would be null).
    options = JsonObjectField(
        cap_setting="JOBS_OPTIONS_MAX_BYTES", required=False, default=dict, initial=dict
    )
    metadata = JsonObjectField(
        cap_setting="JOBS_METADATA_MAX_BYTES", required=False, default=dict, initial=dict
    )
    reuse_result = DefaultTrueBooleanField(
        required=False,
        default=True,
        help_text="false: call the extractor even if the result of an identical document (same "
        "SHA-256, extractor, model and options) of yours could be reused. Reuse is on only for "
        "extractors that set a reuse window.",
    )
    # `initial`: the browsable API's select starts at the default, not at its first choice.
    priority = PriorityField(required=False, initial=Priority.NORMAL.code, help_text=PRIORITY_HELP)

    def validate_extractor(self, extractor: Extractor) -> Extractor:
        if not extractor.enabled:
            raise serializers.ValidationError(f"Extractor {extractor.slug} is disabled.")
        return extractor

    def validate_source_url(self, url: str) -> str:
        if not url:
            return url  # as if absent (the browsable API's forms send every field)
        try:
            check_public_url(url, approved_hosts=self.context.get("approved_hosts"))
        except UnsafeURLError as error:
            raise serializers.ValidationError(error.message) from None
        return url

    def validate_file(self, upload):
        # None: a form's empty file input (allow_null), the same as no file.
        if upload is not None and upload.size == 0:
            raise serializers.ValidationError("The file is empty.")
        return upload

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        upload = data.get("upload")
        if upload is not None:
            data["file_name"] = data.get("file_name") or upload.name
            data["content_type"] = data.get("content_type") or upload_type(upload)
            data["file_size"] = upload.size
        if problems := NewJob(**data).problems():
            raise serializers.ValidationError(problems)
        return data


def request_fingerprint(validated: dict[str, Any]) -> str:
    """A digest of what was asked, to tell an idempotent replay from a reused key."""
    data = dict(validated)
    data["extractor"] = data["extractor"].slug
    upload = data.pop("upload", None)
    if upload is not None:
        digest = hashlib.sha256()
        for chunk in upload.chunks():
            digest.update(chunk)
        upload.seek(0)
        data["file_digest"] = digest.hexdigest()
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


_checkers = threading.local()


def create_checker() -> ExtractionJobCreateSerializer:
    """This thread's create serializer, reused from request to request to validate: DRF
    deep-copies every declared field into each new serializer, a large share of a create. Safe
    to reuse: `run_validation` keeps nothing on the serializer."""
    checker = getattr(_checkers, "create", None)
    if checker is None:
        checker = _checkers.create = ExtractionJobCreateSerializer()
    return checker


class ExtractionJobJsonCreateSerializer(ExtractionJobCreateSerializer):
    """A create as JSON, for the OpenAPI document: without the binary `file` (JSON carries no
    upload; multipart does)."""

    file = None


def upload_type(upload) -> str:
    """The upload's declared type; when the client declared none in particular (curl -F sends
    application/octet-stream), the type its name implies. The first bytes are checked later."""
    declared = upload.content_type or ""
    if declared in ("", "application/octet-stream"):
        return mimetypes.guess_type(upload.name or "")[0] or declared
    return declared


@extend_schema_field({"type": "object", "additionalProperties": True})
class BulkItemField(serializers.Field):
    """A bulk item as it came, whatever it is: the item's own validation judges it, so that one
    that is not even an object fails alone, under its index (`bulk.bulk_results`)."""

    def validate_empty_values(self, data):
        return False, data  # null too (`allow_null` would document the items as nullable)

    def to_internal_value(self, data):
        return data

    def to_representation(self, value):
        return value


def jobs_field(*, min_length: int = 1) -> serializers.ListField:
    """A bulk body's `jobs`: items each validated as a JSON create (`BulkItemValidator`)."""
    return serializers.ListField(
        child=BulkItemField(),
        min_length=min_length,
        max_length=settings.JOBS_BULK_MAX,
        help_text="Job objects as for a single JSON create (source_url only).",
    )


class BatchFieldsSerializer(StrictSerializer):
    """A new batch's own fields."""

    client_reference = serializers.CharField(
        max_length=255,
        required=False,
        allow_null=True,
        default=None,
        help_text="Your id for it (e.g. the grant request's); unique among your batches.",
    )
    metadata = JsonObjectField(
        cap_setting="JOBS_METADATA_MAX_BYTES", required=False, default=dict, initial=dict
    )
    close = serializers.BooleanField(
        default=False, help_text="Create it closed: it takes no more jobs."
    )


class BulkCreateSerializer(StrictSerializer):
    list_items = {"jobs": "job"}
    jobs = jobs_field()
    batch = BatchFieldsSerializer(
        required=False, help_text="Create a batch holding the created jobs."
    )


class BatchCreateSerializer(BatchFieldsSerializer):
    list_items = {"jobs": "job"}
    jobs = jobs_field(min_length=0)


class BatchJobsSerializer(StrictSerializer):
    list_items = {"jobs": "job"}
    jobs = jobs_field()


class BulkItemSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["created", "error"])
    job = ExtractionJobSerializer(allow_null=True)
    error = serializers.DictField(allow_null=True)


class BulkResultSerializer(serializers.Serializer):
    created = serializers.IntegerField()
    failed = serializers.IntegerField()
    results = BulkItemSerializer(many=True)
    batch = BatchSerializer(
        allow_null=True, help_text="The batch created with the jobs (with `batch`); else null."
    )


class BatchCreateResultSerializer(serializers.Serializer):
    batch = BatchSerializer()
    created = serializers.IntegerField()
    failed = serializers.IntegerField()
    results = BulkItemSerializer(
        many=True, help_text="Each item's outcome, in order (empty on an idempotent replay)."
    )


class BatchJobsResultSerializer(serializers.Serializer):
    created = serializers.IntegerField()
    failed = serializers.IntegerField()
    results = BulkItemSerializer(many=True)


class RefusalSerializer(serializers.Serializer):
    job = serializers.UUIDField()
    code = serializers.CharField()
    detail = serializers.CharField()


class BatchOperationResultSerializer(serializers.Serializer):
    batch = BatchSerializer()
    moved = serializers.IntegerField(help_text="Jobs cancelled or requeued.")
    refused = serializers.IntegerField(help_text="Jobs left as they were.")
    refusals = RefusalSerializer(many=True, help_text="Why, for the first 100 of them.")


class JobActionSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=1000, required=False, allow_blank=True, default="")


class JobRequeueSerializer(JobActionSerializer):
    force = serializers.BooleanField(
        default=False, help_text="Required to requeue a succeeded job."
    )
    # null (or a form's empty choice): keep the job's own.
    priority = PriorityField(
        required=False,
        allow_null=True,
        help_text="The new attempt's priority (default: the job's own).",
    )


class BatchCancelSerializer(JobActionSerializer):
    """A batch's cancel: why (recorded on each job's audit row)."""


class BatchRequeueSerializer(JobRequeueSerializer):
    """A batch's requeue: as a job's, for each of its failed jobs (its succeeded ones too with
    `force`)."""

    force = serializers.BooleanField(default=False, help_text="Requeue its succeeded jobs too.")
