"""The audit log (every status change), the status table, and raw results and events."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from jobtracking.admin.common import JobScopedAdmin, ReadOnlyAdmin, moment, status_badge
from jobtracking.admin.paging import EstimatedCountPaginator
from jobtracking.models import ExtractionResult, JobEvent, JobStatus, JobStatusChange


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
        url = reverse("admin:jobtracking_extractionjob_change", args=[change.job_id])
        return format_html('<a href="{}">{}</a>', url, str(change.job_id)[-12:])

    @admin.display(description="to status")
    def coloured_to_status(self, change: JobStatusChange):
        return status_badge(change.to_status_id)


@admin.register(JobStatus)
class JobStatusAdmin(ReadOnlyAdmin):
    list_display = ["code", "label", "terminal", "description"]


admin.site.register(ExtractionResult, JobScopedAdmin)
admin.site.register(JobEvent, JobScopedAdmin)
