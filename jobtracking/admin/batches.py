"""The batches list and the batch page: each batch's aggregate (computed from its jobs, for a
whole page of batches in one grouped query), its events, and cancel / requeue of its jobs,
checked against the permissions the jobs admin uses for the same actions."""

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from jobtracking import batch_states, states
from jobtracking.admin.common import (
    STATUS_LABELS,
    DateRangeFilter,
    ReadOnlyAdmin,
    admin_actor,
    moment,
    record,
    requeue_reason_given,
    uuid_search,
)
from jobtracking.admin.job_page import JobActForm, RequeueForm
from jobtracking.admin.jobs import JobActionForm, chosen_priority
from jobtracking.admin.paging import EstimatedCountPaginator
from jobtracking.errors import ApplicationError
from jobtracking.models import Batch, Priority
from jobtracking.selectors import (
    BatchSummary,
    batch_list,
    batch_status_filter,
    batch_summaries,
    batch_summary,
    job_may_act_on_batch,
)
from jobtracking.services.batches import batch_cancel, batch_requeue
from jobtracking.services.transitions import BatchOutcome

BATCH_STATUS_LABELS = {
    status: status.replace("_", " ").capitalize() for status in batch_states.STATUSES
}


def batch_status_badge(status: str):
    # A class per status (console.css), not an inline style: the console runs under a CSP.
    return format_html(
        '<span class="batch-status batch-status-{}">{}</span>', status, BATCH_STATUS_LABELS[status]
    )


def progress_bar(summary: BatchSummary):
    return format_html(
        '<progress class="batch-progress" max="100" value="{}">{}%</progress> <small>{}%</small>',
        summary.progress,
        summary.progress,
        summary.progress,
    )


def jobs_url(**params: str) -> str:
    return f"{reverse('admin:jobtracking_extractionjob_changelist')}?{urlencode(params)}"


class BatchStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return list(BATCH_STATUS_LABELS.items())

    def queryset(self, request, queryset):
        if self.value() in batch_states.STATUSES:
            return queryset.filter(batch_status_filter(self.value()))
        return queryset


class CreatedFilter(DateRangeFilter):
    title = "created"
    parameter_name = "created"


class BatchChangeList(ChangeList):
    """Gives each batch of the page its aggregate (`batch.summary`), in one grouped query."""

    def get_results(self, request):
        super().get_results(request)
        self.result_list = list(self.result_list)
        summaries = batch_summaries([batch.pk for batch in self.result_list])
        for batch in self.result_list:
            batch.summary = summaries[batch.pk]


def page_summary(batch: Batch, summary: BatchSummary) -> list[tuple[str, Any]]:
    client = batch.requested_by
    rows = [
        ("Status", batch_status_badge(summary.status(batch))),
        ("Client reference", batch.client_reference or "—"),
        ("Client", client.get_username() if client else "—"),
        ("Jobs", f"{summary.total} ({summary.active} active, {summary.failed} failed)"),
        ("Progress", progress_bar(summary)),
        ("Created", moment(batch.created_at)),
        ("Closed", moment(batch.closed_at)),
        ("First job ended", moment(summary.first_completed_at)),
        ("Last job ended", moment(summary.last_completed_at)),
    ]
    if batch.cancelled_at:
        rows.append(("Cancelled", moment(batch.cancelled_at)))
    else:
        rows.append(("Completed", moment(batch.completed_at)))
    return rows


def counts_by_status(batch: Batch, summary: BatchSummary) -> list[dict[str, Any]]:
    return [
        {
            "status": status,
            "label": STATUS_LABELS[status],
            "count": count,
            "url": jobs_url(batch=str(batch.pk), status=status),
        }
        for status, count in summary.by_status.items()
    ]


def failures_by_code(batch: Batch, summary: BatchSummary) -> list[dict[str, Any]]:
    """Most frequent first. A cancelled job has no error code: its status stands for it."""
    rows = []
    for code, count in sorted(summary.failures_by_code.items(), key=lambda item: -item[1]):
        filter_by = {"status": code} if code in states.ALL else {"error_code__exact": code}
        url = jobs_url(batch=str(batch.pk), **filter_by)
        rows.append({"code": code, "count": count, "url": url})
    return rows


def batch_timeline(batch: Batch) -> list[dict[str, Any]]:
    """Its own events (batch.created, .completed, .cancelled), with the status and the counts
    they carried (the batch as it was then)."""
    rows = []
    for event in batch.events.order_by("id"):
        by_status = event.payload.get("by_status") or {}
        status = event.payload.get("status")
        rows.append(
            {
                "event": event,
                "at": moment(event.created_at),
                "status": batch_status_badge(status) if status in batch_states.STATUSES else "—",
                "counts": ", ".join(
                    f"{STATUS_LABELS.get(code, code)}: {n}" for code, n in by_status.items() if n
                ),
            }
        )
    return rows


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdmin):
    list_display = [
        "reference",
        "client",
        "status",
        "counts",
        "progress",
        "created",
        "finished",
    ]
    list_display_links = ["reference"]
    list_filter = [BatchStatusFilter, CreatedFilter]
    search_fields = ["client_reference"]
    search_help_text = "A client reference (exact, or its start) or a batch id (whole)."
    list_per_page = 50
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    ordering = ["-created_at"]
    action_form = JobActionForm
    actions = ["cancel_selected", "requeue_selected"]
    change_form_template = "admin/jobtracking/batch/change_form.html"
    fields = [
        "id",
        "client_reference",
        "requested_by",
        "metadata",
        "idempotency_key",
        "created_at",
        "closed_at",
        "cancelled_at",
        "completed_at",
    ]
    readonly_fields = fields

    def get_changelist(self, request, **kwargs):
        return BatchChangeList

    def get_queryset(self, request):
        # The jobs' reach: a staff member's own batches unless they may view all.
        return batch_list(user=request.user)

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        by_reference = queryset.filter(client_reference__startswith=term)
        return by_reference | uuid_search(queryset, term, "pk"), False

    @admin.display(description="client reference", ordering="client_reference")
    def reference(self, batch: Batch) -> str:
        return batch.client_reference or f"({str(batch.pk)[-12:]})"

    @admin.display(description="client")
    def client(self, batch: Batch) -> str:
        return batch.requested_by.get_username() if batch.requested_by else "—"

    @admin.display(description="status")
    def status(self, batch: Batch):
        return batch_status_badge(batch.summary.status(batch))

    @admin.display(description="total / active / failed")
    def counts(self, batch: Batch) -> str:
        summary = batch.summary
        return f"{summary.total} / {summary.active} / {summary.failed}"

    @admin.display(description="progress")
    def progress(self, batch: Batch):
        return progress_bar(batch.summary)

    @admin.display(description="created", ordering="created_at")
    def created(self, batch: Batch) -> str:
        return moment(batch.created_at)

    @admin.display(description="finished", ordering="completed_at")
    def finished(self, batch: Batch) -> str:
        return moment(batch.completed_at)

    # Permissions: the jobs admin's, since acting on a batch acts on its jobs.

    def has_requeue_permission(self, request) -> bool:
        return request.user.has_perm("jobtracking.requeue_extractionjob")

    def has_cancel_permission(self, request) -> bool:
        return request.user.has_perm("jobtracking.cancel_extractionjob")

    def _may_act(self, request, batch: Batch, verb: str) -> bool:
        allowed = getattr(self, f"has_{verb}_permission")(request)
        return allowed and job_may_act_on_batch(user=request.user, batch=batch)

    @staticmethod
    def _act(verb: str, batch: Batch, actor, reason: str, force: bool, priority) -> BatchOutcome:
        if verb == "cancel":
            return batch_cancel(batch_id=batch.pk, actor=actor, reason=reason)
        return batch_requeue(
            batch_id=batch.pk, actor=actor, reason=reason, force=force, priority=priority
        )

    def _apply(self, request, queryset, verb: str, done_word: str) -> None:
        actor = admin_actor(request)
        reason = request.POST.get("reason", "")
        force, priority = bool(request.POST.get("force")), chosen_priority(request)
        done, refused, moved, jobs_refused = [], [], 0, 0
        for batch in queryset.select_related(None).only("pk", "requested_by"):
            short = str(batch.pk)[-12:]
            if not job_may_act_on_batch(user=request.user, batch=batch):
                refused.append(f"{short}: another client's batch (needs manage_all_extractionjobs)")
                continue
            try:
                outcome = self._act(verb, batch, actor, reason, force, priority)
            except ApplicationError as error:
                refused.append(f"{short}: {error.message}")
                continue
            done.append(batch)
            moved += len(outcome.moved)
            jobs_refused += len(outcome.refused)
        record(request, done, f"{done_word.capitalize()} its jobs (list action). {reason}".strip())
        if done:
            self.message_user(
                request,
                f"{len(done)} batch(es): {moved} job(s) {done_word}, {jobs_refused} refused.",
                messages.SUCCESS,
            )
        if refused:
            self.message_user(
                request, f"{len(refused)} refused: " + "; ".join(refused[:10]), messages.WARNING
            )

    @admin.action(description="Cancel the active jobs of selected batches", permissions=["cancel"])
    def cancel_selected(self, request, queryset):
        self._apply(request, queryset, "cancel", "cancelled")

    @admin.action(
        description="Requeue the failed jobs of selected batches", permissions=["requeue"]
    )
    def requeue_selected(self, request, queryset):
        if requeue_reason_given(self, request):
            self._apply(request, queryset, "requeue", "requeued")

    # The batch page and its buttons.

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "<uuid:pk>/cancel/",
                view(lambda request, pk: self._act_view(request, pk, "cancel")),
                name="jobtracking_batch_cancel",
            ),
            path(
                "<uuid:pk>/requeue/",
                view(lambda request, pk: self._act_view(request, pk, "requeue")),
                name="jobtracking_batch_requeue",
            ),
            *super().get_urls(),
        ]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            summary = batch_summary(obj, with_failed_jobs=True)
            context.update(
                summary=page_summary(obj, summary),
                counts=counts_by_status(obj, summary),
                failures=failures_by_code(obj, summary),
                failed_jobs=summary.failed_jobs,
                failed_total=summary.failed,
                timeline=batch_timeline(obj),
                may_see_events=request.user.has_perm("jobtracking.view_jobevent"),
                # As the table allows, but not again once cancelled (that would cancel only
                # what a requeue made active since: its jobs' own buttons do).
                may_cancel=batch_states.may(batch_states.CANCEL, status := summary.status(obj))
                and status != batch_states.CANCELLED
                and self._may_act(request, obj, "cancel"),
                may_requeue=summary.total > summary.active
                and self._may_act(request, obj, "requeue"),
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _act_view(self, request, pk, verb: str):
        batch = self.get_object(request, pk)  # within the staff member's reach, or None
        if batch is None:
            raise Http404
        if not (self.has_view_permission(request, batch) and self._may_act(request, batch, verb)):
            raise PermissionDenied
        form = (RequeueForm if verb == "requeue" else JobActForm)(request.POST or None)
        done_word = "requeued" if verb == "requeue" else "cancelled"
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            reason = data["reason"]
            priority = Priority(int(data["priority"])) if data.get("priority") else None
            try:
                outcome = self._act(
                    verb, batch, admin_actor(request), reason, data.get("force", False), priority
                )
            except ApplicationError as error:
                self.message_user(request, f"Not {done_word}: {error.message}", messages.ERROR)
            else:
                record(request, [batch], f"{done_word.capitalize()} its jobs. {reason}".strip())
                self.message_user(
                    request,
                    f"{len(outcome.moved)} job(s) {done_word}, {len(outcome.refused)} refused.",
                    messages.SUCCESS,
                )
            return redirect(reverse("admin:jobtracking_batch_change", args=[batch.pk]))
        context = {
            **self.admin_site.each_context(request),
            "title": f"{verb.capitalize()} batch {batch.client_reference or batch.pk}",
            "batch": batch,
            "verb": verb,
            "form": form,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/jobtracking/batch/act.html", context)
