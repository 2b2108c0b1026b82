import contextlib
import csv
import uuid
from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import StreamingHttpResponse
from django.utils import timezone
from django.utils.html import format_html

from jobtracking.admin_paging import EstimatedCountPaginator
from jobtracking.errors import ApplicationError
from jobtracking.models import (
    ActorType,
    DeliveryState,
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatus,
    JobStatusChange,
    Priority,
    WebhookDelivery,
    WebhookSubscription,
)
from jobtracking.selectors import VIEW_ALL, job_list, job_may_act
from jobtracking.services import Actor, job_cancel, job_requeue, jobs_set_priority
from jobtracking.webhooks import delivery_retry, subscription_secret

STATUS_COLOURS = {
    "pending": "#6c757d",
    "submitting": "#0d6efd",
    "submitted": "#0d6efd",
    "processing": "#6610f2",
    "succeeded": "#198754",
    "failed": "#dc3545",
    "timed_out": "#fd7e14",
    "cancelled": "#495057",
}
# A cell starting with one of these is a formula to a spreadsheet (OWASP "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value):
    """Text that a spreadsheet would run as a formula gets a leading quote; other values pass."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


CSV_COLUMNS = [
    "id",
    "status_id",
    "extractor__slug",
    "file_id",
    "file_name",
    "attempt",
    "error_code",
    "created_at",
    "completed_at",
]


def status_badge(code: str):
    return format_html(
        '<span style="background:{};color:#fff;padding:2px 6px;border-radius:3px">{}</span>',
        STATUS_COLOURS.get(code, "#333"),
        code,
    )


class ReadOnlyAdmin(admin.ModelAdmin):
    """History is written by services only: nobody, superusers included, edits it here."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class StatusChangeInline(ReadOnlyInline):
    model = JobStatusChange
    verbose_name_plural = "Status timeline"
    fields = ["changed_at", "from_status", "to_status", "attempt", "actor_type", "actor", "reason"]
    readonly_fields = fields
    ordering = ["changed_at", "id"]


class ResultInline(ReadOnlyInline):
    model = ExtractionResult
    fields = ["attempt", "page_count", "size_bytes", "model_version", "received_at", "preview"]
    readonly_fields = fields

    @admin.display(description="Payload")
    def preview(self, result: ExtractionResult):
        if result.payload is None:
            return f"stored as {result.payload_file.name}"
        pages = result.payload.get("pages") if isinstance(result.payload, dict) else None
        if pages and isinstance(pages[0], dict):
            return (pages[0].get("text") or "")[:300]
        return str(result.payload)[:300]


class EventInline(ReadOnlyInline):
    model = JobEvent
    fields = ["id", "type", "created_at", "event_id"]
    readonly_fields = fields


class JobActionForm(ActionForm):
    reason = forms.CharField(required=False, max_length=1000, help_text="Recorded in the history.")
    force = forms.BooleanField(required=False, label="Force (requeue succeeded jobs)")
    priority = forms.ChoiceField(
        required=False,
        choices=[("", "Priority (keep)")] + [(p.code, p.label) for p in Priority],
        label="Priority",
        help_text="For Set priority, and for Requeue (default: keep).",
    )


class DateRangeFilter(admin.SimpleListFilter):
    """Last day / week / month on a date field, without a full-table date scan."""

    field = "created_at"
    ranges = {"1": "Last 24 hours", "7": "Last 7 days", "30": "Last 30 days", "90": "Last 90 days"}

    def lookups(self, request, model_admin):
        return list(self.ranges.items())

    def queryset(self, request, queryset):
        if self.value() in self.ranges:
            since = timezone.now() - timedelta(days=int(self.value()))
            return queryset.filter(**{f"{self.field}__gte": since})
        return queryset


class CreatedFilter(DateRangeFilter):
    title = "created"
    parameter_name = "created"


class CompletedFilter(DateRangeFilter):
    title = "completed"
    parameter_name = "completed"
    field = "completed_at"


def _chosen_priority(request) -> Priority | None:
    value = request.POST.get("priority", "")
    return Priority.named(value) if value in Priority.codes() else None


@admin.register(ExtractionJob)
class ExtractionJobAdmin(ReadOnlyAdmin):
    list_display = [
        "short_id",
        "file",
        "extractor",
        "coloured_status",
        "priority",
        "attempt",
        "created_at",
        "turnaround",
        "error_code",
    ]
    list_filter = [
        "status",
        "priority",
        "extractor",
        "error_code",
        CreatedFilter,
        CompletedFilter,
    ]
    search_fields = ["file_id"]
    search_help_text = "A job id, file id or external id (exact), or the start of a file name."
    list_select_related = ["extractor"]
    list_per_page = 50
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    ordering = ["-created_at"]
    inlines = [StatusChangeInline, ResultInline, EventInline]
    action_form = JobActionForm
    actions = ["requeue_selected", "cancel_selected", "set_priority", "export_csv"]
    readonly_fields = [f.name for f in ExtractionJob._meta.fields if f.name != "upload"]
    exclude = ["upload"]

    @admin.display(description="id", ordering="id")
    def short_id(self, job: ExtractionJob) -> str:
        return str(job.pk)[-12:]

    @admin.display(description="file")
    def file(self, job: ExtractionJob):
        return format_html("{}<br><small>{}</small>", job.file_name or "—", job.file_id)

    @admin.display(description="status", ordering="status")
    def coloured_status(self, job: ExtractionJob):
        return status_badge(job.status_id)

    @admin.display(description="turnaround")
    def turnaround(self, job: ExtractionJob) -> str:
        if not job.completed_at:
            return "—"
        return f"{(job.completed_at - job.created_at).total_seconds():.1f} s"

    def get_queryset(self, request):
        # The same reach as the API: a staff member's own jobs unless they may view all.
        return job_list(user=request.user).select_related(None).select_related("extractor")

    def get_search_results(self, request, queryset, search_term):
        # Exact matches and a prefix only: each uses an index even with millions of jobs.
        term = search_term.strip()
        if not term:
            return queryset, False
        query = Q(file_id=term) | Q(external_job_id=term) | Q(file_name__startswith=term)
        with contextlib.suppress(ValueError):
            query |= Q(pk=uuid.UUID(term))
        return queryset.filter(query), False

    def has_requeue_permission(self, request) -> bool:
        return request.user.has_perm("jobtracking.requeue_extractionjob")

    def has_cancel_permission(self, request) -> bool:
        return request.user.has_perm("jobtracking.cancel_extractionjob")

    def _apply(self, request, queryset, verb: str, act) -> None:
        actor = Actor(ActorType.ADMIN, request.user)
        reason = request.POST.get("reason", "")
        done, refused = 0, []
        for job in queryset.select_related(None).only("pk", "requested_by"):
            job_id = job.pk
            try:
                if not job_may_act(user=request.user, job=job):
                    raise PermissionDenied("another client's job (needs manage_all_extractionjobs)")
                act(job_id=job_id, actor=actor, reason=reason)
                done += 1
            except (ApplicationError, PermissionDenied) as error:
                refused.append(f"{str(job_id)[-12:]}: {getattr(error, 'message', error)}")
        if done:
            self.message_user(request, f"{done} job(s) {verb}.", messages.SUCCESS)
        if refused:
            self.message_user(
                request,
                f"{len(refused)} refused: " + "; ".join(refused[:10]),
                messages.WARNING,
            )

    @admin.action(description="Requeue selected jobs", permissions=["requeue"])
    def requeue_selected(self, request, queryset):
        force = bool(request.POST.get("force"))
        priority = _chosen_priority(request)
        self._apply(
            request,
            queryset,
            "requeued",
            lambda **kwargs: job_requeue(force=force, priority=priority, **kwargs),
        )

    @admin.action(description="Set the priority of selected jobs", permissions=["requeue"])
    def set_priority(self, request, queryset):
        priority = _chosen_priority(request)
        if priority is None:
            self.message_user(request, "Choose a priority first.", messages.ERROR)
            return

        def act(*, job_id, actor, reason) -> None:
            outcome = jobs_set_priority(
                job_ids=[job_id], priority=priority, actor=actor, reason=reason
            )
            if job_id in outcome.refused:
                raise outcome.refused[job_id]

        self._apply(request, queryset, f"set to {priority.code}", act)

    @admin.action(description="Cancel selected jobs", permissions=["cancel"])
    def cancel_selected(self, request, queryset):
        self._apply(request, queryset, "cancelled", job_cancel)

    @admin.action(description="Export selected (or all filtered) jobs as CSV", permissions=["view"])
    def export_csv(self, request, queryset):
        class Echo:
            def write(self, value):
                return value

        writer = csv.writer(Echo())
        rows = queryset.order_by("-created_at").values_list(*CSV_COLUMNS).iterator(chunk_size=2000)
        lines = (writer.writerow([csv_safe(value) for value in row]) for row in rows)
        header = writer.writerow([c.replace("__", "_") for c in CSV_COLUMNS])
        response = StreamingHttpResponse(
            (line for chunk in ([header], lines) for line in chunk), content_type="text/csv"
        )
        response["Content-Disposition"] = 'attachment; filename="extraction-jobs.csv"'
        return response

    def changelist_view(self, request, extra_context=None):
        # "Export" with nothing ticked exports the whole filtered list.
        if request.POST.get("action") == "export_csv" and not request.POST.getlist(
            admin.helpers.ACTION_CHECKBOX_NAME
        ):
            post = request.POST.copy()
            post["select_across"] = "1"
            post.setlist(admin.helpers.ACTION_CHECKBOX_NAME, ["0"])
            request.POST = post
        return super().changelist_view(request, extra_context)


@admin.register(JobStatusChange)
class JobStatusChangeAdmin(ReadOnlyAdmin):
    """The audit log."""

    list_display = [
        "changed_at",
        "job_link",
        "from_status",
        "coloured_to_status",
        "attempt",
        "actor_type",
        "actor",
        "reason",
    ]
    list_filter = ["to_status", "actor_type", "actor", ("changed_at", admin.DateFieldListFilter)]
    search_fields = ["=job__id"]
    list_select_related = ["actor"]
    list_per_page = 100
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    ordering = ["-changed_at"]

    def get_queryset(self, request):
        changes = super().get_queryset(request)
        if request.user.has_perm(VIEW_ALL):
            return changes
        return changes.filter(job__requested_by=request.user)

    @admin.display(description="job")
    def job_link(self, change: JobStatusChange):
        return format_html(
            '<a href="../extractionjob/{}/change/">{}</a>', change.job_id, str(change.job_id)[-12:]
        )

    @admin.display(description="to status")
    def coloured_to_status(self, change: JobStatusChange):
        return status_badge(change.to_status_id)


@admin.register(JobStatus)
class JobStatusAdmin(ReadOnlyAdmin):
    list_display = ["code", "label", "terminal", "description"]


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(admin.ModelAdmin):
    list_display = ["url", "description", "event_types", "active", "secret_version", "created_at"]
    readonly_fields = ["secret_version", "created_by", "created_at", "updated_at"]
    actions = ["rotate_secret"]

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)
        if not change:
            self._show_secret(request, obj)

    def _show_secret(self, request, subscription):
        self.message_user(
            request,
            f"Signing secret for {subscription.url} (shown once, not stored): "
            f"{subscription_secret(subscription)}",
            messages.WARNING,
        )

    @admin.action(description="Rotate the signing secret and show the new one")
    def rotate_secret(self, request, queryset):
        for subscription in queryset:
            subscription.secret_version += 1
            subscription.save(update_fields=["secret_version", "updated_at"])
            self._show_secret(request, subscription)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "event",
        "subscription",
        "state",
        "attempts",
        "last_status_code",
        "next_attempt_at",
        "delivered_at",
    ]
    list_filter = ["state", "subscription"]
    list_select_related = ["event", "subscription"]
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    actions = ["retry_dead"]

    def has_retry_permission(self, request) -> bool:
        return request.user.has_perm("jobtracking.view_webhookdelivery") and request.user.has_perm(
            "jobtracking.change_webhooksubscription"
        )

    @admin.action(description="Retry selected dead deliveries", permissions=["retry"])
    def retry_dead(self, request, queryset):
        count = delivery_retry(queryset=queryset.filter(state=DeliveryState.DEAD))
        self.message_user(request, f"{count} dead delivery(ies) scheduled again.")


admin.site.register(ExtractionResult, ReadOnlyAdmin)
admin.site.register(JobEvent, ReadOnlyAdmin)
