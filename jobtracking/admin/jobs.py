"""The jobs list: filters, index-backed search (short id included), bulk actions and CSV."""

import uuid

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.core.exceptions import PermissionDenied
from django.urls import reverse
from django.utils.html import format_html

from jobtracking import states
from jobtracking.admin.archived import ArchivedJobViews
from jobtracking.admin.common import (
    STATUS_LABELS,
    DateRangeFilter,
    ReadOnlyAdmin,
    admin_actor,
    moment,
    record,
    requeue_reason_given,
    span,
    status_badge,
)
from jobtracking.admin.export import jobs_csv_response
from jobtracking.admin.job_page import JobPageViews
from jobtracking.admin.paging import EstimatedCountPaginator
from jobtracking.errors import ApplicationError
from jobtracking.models import ExtractionJob, Priority
from jobtracking.representation import file_facts
from jobtracking.selectors import job_list, job_may_act, job_search
from jobtracking.services import job_cancel, job_requeue, jobs_set_priority


class StatusFilter(admin.SimpleListFilter):
    """Statuses by their labels, in lifecycle order."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return list(STATUS_LABELS.items())

    def queryset(self, request, queryset):
        return queryset.filter(status=self.value()) if self.value() in states.ALL else queryset


class BatchFilter(admin.SimpleListFilter):
    """The jobs of one batch (`?batch=<id>`, as the batch page links): in the sidebar only while
    chosen (Django applies only the filters it shows), so that staff see it and can clear it."""

    title = "batch"
    parameter_name = "batch"

    def _batch_id(self) -> uuid.UUID | None:
        try:
            return uuid.UUID(self.value() or "")
        except ValueError:
            return None

    def lookups(self, request, model_admin):
        if self.value() is None:
            return []
        batch_id = self._batch_id()
        return [(self.value(), f"Batch {str(batch_id)[-12:]}" if batch_id else "No such batch")]

    def queryset(self, request, queryset):
        if self.value() is None:
            return queryset
        batch_id = self._batch_id()
        return queryset.filter(batch_id=batch_id) if batch_id else queryset.none()


class JobActionForm(ActionForm):
    reason = forms.CharField(required=False, max_length=1000, help_text="Recorded in the history.")
    force = forms.BooleanField(required=False, label="Force (requeue succeeded jobs)")
    priority = forms.ChoiceField(
        required=False,
        choices=[("", "Priority (keep)")] + [(p.code, p.label) for p in Priority],
        label="Priority",
        help_text="For Set priority, and for Requeue (default: keep).",
    )


class CreatedFilter(DateRangeFilter):
    title = "created"
    parameter_name = "created"


class CompletedFilter(DateRangeFilter):
    title = "completed"
    parameter_name = "completed"
    field = "completed_at"


def chosen_priority(request) -> Priority | None:
    value = request.POST.get("priority", "")
    return Priority.named(value) if value in Priority.codes() else None


@admin.register(ExtractionJob)
class ExtractionJobAdmin(ArchivedJobViews, JobPageViews, ReadOnlyAdmin):
    list_display = [
        "short_id",
        "file",
        "extractor",
        "coloured_status",
        "priority",
        "attempt",
        "created",
        "turnaround",
        "error",
    ]
    list_filter = [
        StatusFilter,
        "priority",
        "extractor",
        "error_code",
        CreatedFilter,
        CompletedFilter,
        BatchFilter,
    ]
    search_fields = ["file_id"]
    search_help_text = (
        "A job id (whole, or the 12 characters shown in the list), a file id or external id "
        "(exact), or the start of a file name. Purged jobs are found by id, file id or external "
        "id, in the archive."
    )
    list_select_related = ["extractor"]
    list_per_page = 50
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    ordering = ["-created_at"]
    action_form = JobActionForm
    actions = ["requeue_selected", "cancel_selected", "set_priority", "export_csv"]
    change_form_template = "admin/jobtracking/extractionjob/change_form.html"
    fieldsets = [
        (
            "File",
            {
                "fields": [
                    "file_id",
                    "file_name",
                    "content_type",
                    "file_size",
                    "file_sha256",
                    "file_facts",
                    "expected_pages",
                    "source_url",
                    "upload_link",
                ]
            },
        ),
        (
            "Request",
            {
                "fields": [
                    "extractor",
                    "requested_by",
                    "priority",
                    "idempotency_key",
                    "options",
                    "metadata",
                    "reuse_result",
                    "reused_from",
                ]
            },
        ),
        (
            "At the extractor",
            {
                "fields": [
                    "external_job_id",
                    "external_status",
                    "progress",
                    "external_url",
                    "external_request_id",
                    "remote_expires_at",
                ]
            },
        ),
        (
            "Times",
            {
                "fields": [
                    "created_at",
                    "held_since",
                    "submitted_at",
                    "started_at",
                    "completed_at",
                    "updated_at",
                ]
            },
        ),
        (
            "Engine internals",
            {
                "classes": ["collapse"],
                "fields": [
                    "id",
                    "status",
                    "attempt",
                    "submit_attempts",
                    "poll_count",
                    "poll_error_count",
                    "due_at",
                    "claimed_at",
                    "lease_expires_at",
                    "deadline_at",
                    "request_fingerprint",
                    "error_code",
                    "error_message",
                ],
            },
        ),
    ]
    readonly_fields = [f.name for f in ExtractionJob._meta.fields] + [
        "file_facts",
        "upload_link",
        "reused_from",
    ]

    @admin.display(description="id", ordering="id")
    def short_id(self, job: ExtractionJob) -> str:
        return str(job.pk)[-12:]

    @admin.display(description="file")
    def file(self, job: ExtractionJob):
        return format_html("{}<br><small>{}</small>", job.file_name or "—", job.file_id)

    @admin.display(description="status", ordering="status")
    def coloured_status(self, job: ExtractionJob):
        return status_badge(job.status_id)

    @admin.display(description="created", ordering="created_at")
    def created(self, job: ExtractionJob):
        return format_html('<span style="white-space:nowrap">{}</span>', moment(job.created_at))

    @admin.display(description="turnaround")
    def turnaround(self, job: ExtractionJob) -> str:
        return span(job.turnaround)

    @admin.display(description="error", ordering="error_code")
    def error(self, job: ExtractionJob):
        return format_html("<small>{}</small>", job.error_code) if job.error_code else "—"

    @admin.display(description="type, size and digest")
    def file_facts(self, job: ExtractionJob) -> str:
        """Where the content type, size and SHA-256 above come from, or why they are not known."""
        return file_facts(job)[1]

    @admin.display(description="upload")
    @admin.display(description="result reused from")
    def reused_from(self, job: ExtractionJob):
        if job.reused_from_job is None:
            return "— (extracted)" if job.status_id == states.SUCCEEDED else "—"
        url = reverse("admin:jobtracking_extractionjob_change", args=[job.reused_from_job])
        return format_html(
            '<a href="{}">job {}</a>, attempt {}', url, job.reused_from_job, job.reused_from_attempt
        )

    def upload_link(self, job: ExtractionJob):
        if not job.upload:
            return "— (sent by URL)"
        url = reverse("admin:jobtracking_job_upload", args=[job.pk])
        return format_html('<a href="{}">Download {}</a>', url, job.file_name or "the upload")

    def get_queryset(self, request):
        # The same reach as the API: a staff member's own jobs unless they may view all.
        return job_list(user=request.user).select_related(None).select_related("extractor")

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if term:
            self.archived_search_messages(request, term)
        return (job_search(queryset, term) if term else queryset), False

    def has_requeue_permission(self, request) -> bool:
        return request.user.has_perm("jobtracking.requeue_extractionjob")

    def has_cancel_permission(self, request) -> bool:
        return request.user.has_perm("jobtracking.cancel_extractionjob")

    def _apply(self, request, queryset, verb: str, act) -> None:
        actor = admin_actor(request)
        reason = request.POST.get("reason", "")
        done, refused = [], []
        for job in queryset.select_related(None).only("pk", "requested_by", "status"):
            job_id = job.pk
            try:
                if not job_may_act(user=request.user, job=job):
                    raise PermissionDenied("another client's job (needs manage_all_extractionjobs)")
                act(job_id=job_id, actor=actor, reason=reason)
                done.append(job)
            except (ApplicationError, PermissionDenied) as error:
                refused.append(f"{str(job_id)[-12:]}: {getattr(error, 'message', error)}")
        record(request, done, f"{verb.capitalize()} (list action). {reason}".strip())
        if done:
            self.message_user(request, f"{len(done)} job(s) {verb}.", messages.SUCCESS)
        if refused:
            self.message_user(
                request,
                f"{len(refused)} refused: " + "; ".join(refused[:10]),
                messages.WARNING,
            )

    @admin.action(description="Requeue selected jobs", permissions=["requeue"])
    def requeue_selected(self, request, queryset):
        if not requeue_reason_given(self, request):
            return
        force = bool(request.POST.get("force"))
        priority = chosen_priority(request)
        self._apply(
            request,
            queryset,
            "requeued",
            lambda **kwargs: job_requeue(force=force, priority=priority, **kwargs),
        )

    @admin.action(description="Set the priority of selected jobs", permissions=["requeue"])
    def set_priority(self, request, queryset):
        priority = chosen_priority(request)
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
        return jobs_csv_response(queryset)

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
