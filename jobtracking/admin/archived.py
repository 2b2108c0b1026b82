"""Purged jobs in the jobs admin: its search says when a matching job was archived and where,
and staff with `download_archived_job` download its archived record (one JSON document)."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html

from jobtracking.admin.common import moment, record
from jobtracking.selectors import archived_job_list, archived_job_record, archived_job_search

DOWNLOAD_ARCHIVED = "jobtracking.download_archived_job"
# Enough to answer "what happened to file X"; a file has few jobs.
SHOWN_MAX = 10


class ArchivedJobViews:
    """Added to the jobs admin: the archive's answer to a search, and the download."""

    def get_urls(self):
        view = self.admin_site.admin_view(self.archived_record_view)
        return [
            path("archived/<uuid:pk>/", view, name="jobtracking_job_archived"),
            *super().get_urls(),
        ]

    def archived_search_messages(self, request, term: str) -> None:
        """One message per purged job the search term names (id, file id or external id) that
        the staff member may see (the same scoping as live jobs)."""
        entries = archived_job_search(archived_job_list(user=request.user), term)[:SHOWN_MAX]
        may_download = request.user.has_perm(DOWNLOAD_ARCHIVED)
        for entry in entries:
            where = format_html(
                "Job {} (file {}, {}) was purged; archived {} to storage “{}”: {}, line {}.",
                entry.job_id,
                entry.file_id,
                entry.status,
                moment(entry.archived_at),
                entry.storage,
                entry.path,
                entry.line,
            )
            if may_download:
                url = reverse("admin:jobtracking_job_archived", args=[entry.job_id])
                where = format_html('{} <a href="{}">Download its record</a>', where, url)
            self.message_user(request, where, messages.INFO)

    def archived_record_view(self, request, pk):
        if not request.user.has_perm(DOWNLOAD_ARCHIVED):
            raise PermissionDenied("Downloading archived jobs needs download_archived_job.")
        entry = get_object_or_404(archived_job_list(user=request.user), pk=pk)
        response = HttpResponse(archived_job_record(entry), content_type="application/json")
        response["Content-Disposition"] = f'attachment; filename="job-{entry.job_id}.json"'
        record(request, [entry], "Downloaded the archived record.")
        return response
