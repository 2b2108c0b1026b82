"""The audit log (every status change), the status table, and raw results and events."""

from django.contrib import admin
from django.template.defaultfilters import filesizeformat
from django.urls import reverse
from django.utils.html import format_html

from jobtracking.admin.common import (
    DateRangeFilter,
    JobScopedAdmin,
    ReadOnlyAdmin,
    batch_link,
    job_link,
    moment,
    status_badge,
    uuid_search,
)
from jobtracking.admin.paging import EstimatedCountPaginator
from jobtracking.models import ExtractionResult, JobEvent, JobStatus, JobStatusChange
from jobtracking.selectors import EVENT_OWNERS


@admin.register(JobStatusChange)
class JobStatusChangeAdmin(JobScopedAdmin):
    list_display = [
        "changed",
        "job_link",
        "from_status",
        "coloured_to_status",
        "attempt",
        "actor_type",
        "actor",
        "reason",
    ]
    # The actors to filter by are those of the changes in the staff member's reach, not every user.
    list_filter = [
        "to_status",
        "actor_type",
        ("actor", admin.RelatedOnlyFieldListFilter),
        ("changed_at", admin.DateFieldListFilter),
    ]
    search_fields = ["=job__id"]
    list_select_related = ["actor"]
    list_per_page = 100
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    ordering = ["-changed_at"]

    @admin.display(description="changed at", ordering="changed_at")
    def changed(self, change: JobStatusChange) -> str:
        return moment(change.changed_at)

    @admin.display(description="job")
    def job_link(self, change: JobStatusChange):
        return job_link(change.job_id)

    @admin.display(description="to status")
    def coloured_to_status(self, change: JobStatusChange):
        return status_badge(change.to_status_id)


@admin.register(JobStatus)
class JobStatusAdmin(ReadOnlyAdmin):
    list_display = ["code", "label", "terminal", "description"]

    def get_model_perms(self, request) -> dict:
        # Reference data (`states.py` declares it; GET /api/v1/statuses/ lists it): kept off
        # the index, its page still reachable from a job's status.
        return {}


class ReceivedFilter(DateRangeFilter):
    title = "received"
    parameter_name = "received"
    field = "received_at"


class PublishedFilter(DateRangeFilter):
    title = "published"
    parameter_name = "published"
    field = "created_at"


class JobIdSearch:
    """Search by whole ids only (`search_ids`): each an index lookup, even with millions of rows."""

    search_ids: tuple[str, ...] = ("job_id",)
    search_fields = search_ids  # Django shows the search box only when this is set

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        return (uuid_search(queryset, term, *self.search_ids) if term else queryset), False


@admin.register(ExtractionResult)
class ExtractionResultAdmin(JobIdSearch, JobScopedAdmin):
    list_display = [
        "job_link",
        "attempt",
        "extractor",
        "pages",
        "size",
        "version",
        "received",
        "full",
    ]
    list_filter = [ReceivedFilter, "job__extractor"]
    search_help_text = "A job id (whole)."
    list_select_related = ["job__extractor"]
    list_per_page = 100
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    # The primary key's order is the order received, and needs no index of its own.
    ordering = ["-id"]
    # The payload is read on the full-result page (`full`), not as a JSON blob here.
    fields = [
        "job_link",
        "attempt",
        "full",
        "extractor",
        "pages",
        "size",
        "version",
        "received",
        "content_sha256",
        "payload_file",
    ]
    readonly_fields = fields

    @admin.display(description="job")
    def job_link(self, result: ExtractionResult):
        return job_link(result.job_id)

    @admin.display(description="extractor", ordering="job__extractor__slug")
    def extractor(self, result: ExtractionResult) -> str:
        return result.job.extractor.slug

    @admin.display(description="pages", ordering="page_count")
    def pages(self, result: ExtractionResult):
        return result.page_count if result.page_count is not None else "—"

    @admin.display(description="size", ordering="size_bytes")
    def size(self, result: ExtractionResult) -> str:
        return filesizeformat(result.size_bytes)

    @admin.display(description="model", ordering="model_version")
    def version(self, result: ExtractionResult) -> str:
        return result.model_version or "—"

    @admin.display(description="received", ordering="received_at")
    def received(self, result: ExtractionResult) -> str:
        return moment(result.received_at)

    @admin.display(description="result")
    def full(self, result: ExtractionResult):
        url = reverse("admin:jobtracking_job_result", args=[result.job_id, result.attempt])
        return format_html('<a href="{}">View</a> · <a href="{}?download=1">JSON</a>', url, url)


@admin.register(JobEvent)
class JobEventAdmin(JobIdSearch, JobScopedAdmin):
    # An event is of a job, of a batch (`batch.*` types) or of a client (`usage.*`).
    job_path = EVENT_OWNERS
    list_display = ["id", "type", "job_link", "published", "event_id"]
    list_filter = ["type", PublishedFilter]
    search_help_text = "An event id or job id (whole)."
    search_ids = search_fields = ("event_id", "job_id")
    # Named, since Django leaves a non-editable field (event_id) off a page by default.
    fields = ["id", "event_id", "type", "job_link", "published", "payload"]
    readonly_fields = fields
    list_per_page = 100
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    ordering = ["-id"]

    @admin.display(description="job or batch")
    def job_link(self, event: JobEvent):
        if event.batch_id:
            return batch_link(event.batch_id)
        return job_link(event.job_id)

    @admin.display(description="published", ordering="created_at")
    def published(self, event: JobEvent) -> str:
        return moment(event.created_at)
