"""The job page, built for operations: what happened (a summary, the timeline with the time
spent in each status, the results) and what staff can do about it (requeue, cancel, open the
upload), each button checking the same permissions as the list actions."""

import json
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from extraction.errors import REQUEUE_ADVICE
from extraction.registry import result_document
from jobtracking import states
from jobtracking.admin.common import (
    admin_actor,
    ago,
    batch_link,
    moment,
    record,
    span,
    status_badge,
)
from jobtracking.errors import ApplicationError
from jobtracking.models import ExtractionJob, ExtractionResult, Priority
from jobtracking.selectors import job_may_act
from jobtracking.services import job_cancel, job_requeue


def summary(job: ExtractionJob, now: datetime) -> list[tuple[str, Any]]:
    """The answers staff look for first, in the order they look."""
    end = job.completed_at or now
    rows = [
        ("Status", status_badge(job.status_id)),
        ("Attempt", job.attempt),
        ("Priority", Priority(job.priority).label),
        ("Created", f"{moment(job.created_at)} ({ago(job.created_at, now)})"),
        ("Turnaround" if job.completed_at else "Running for", span(end - job.attempt_started_at)),
        ("Extractor", job.extractor.slug),
        ("External id", job.external_job_id or "—"),
    ]
    if job.batch_id:
        rows.append(("Batch", batch_link(job.batch_id)))
    if job.error_code:
        rows.insert(1, ("Error", f"{job.get_error_code_display()} ({job.error_code})"))
        rows.insert(2, ("Error message", job.error_message or "—"))
        if job.error_code in REQUEUE_ADVICE:
            rows.insert(3, ("Will a requeue help?", REQUEUE_ADVICE[job.error_code][1]))
    return rows


def timeline(job: ExtractionJob, now: datetime) -> list[dict[str, Any]]:
    """Each change with the time spent in the status it entered (until the next change, or
    until now while the job is still there), grouped by attempt."""
    changes = list(job.status_changes.select_related("actor").order_by("changed_at", "id"))
    rows = []
    for index, change in enumerate(changes):
        following = changes[index + 1].changed_at if index + 1 < len(changes) else None
        if following is None and change.to_status_id in states.TERMINAL:
            stayed = None
        else:
            stayed = (following or now) - change.changed_at
        rows.append(
            {
                "change": change,
                "at": moment(change.changed_at),
                "stayed": span(stayed) if stayed is not None else "final",
                "ongoing": following is None and stayed is not None,
                "badge": status_badge(change.to_status_id),
                "from_badge": status_badge(change.from_status_id),
                "actor": change.actor or change.get_actor_type_display(),
                "details": sorted(change.details.items()),
                "new_attempt": index == 0 or change.attempt != changes[index - 1].attempt,
            }
        )
    return rows


class JobActForm(forms.Form):
    reason = forms.CharField(
        required=False, max_length=1000, widget=forms.Textarea(attrs={"rows": 3, "cols": 60})
    )


class RequeueForm(JobActForm):
    # A requeue costs another extraction: staff say why, for the history's readers.
    reason = forms.CharField(
        max_length=1000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Why it is requeued (recorded in its history).",
    )
    force = forms.BooleanField(required=False, label="Force: requeue although it succeeded")
    priority = forms.ChoiceField(
        required=False, choices=[("", "Keep the job's priority"), *Priority.choices]
    )


class JobPageViews:
    """Views added to the job admin: buttons, upload download and the full result."""

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<uuid:pk>/requeue/", view(self.requeue_view), name="jobtracking_job_requeue"),
            path("<uuid:pk>/cancel/", view(self.cancel_view), name="jobtracking_job_cancel"),
            path("<uuid:pk>/upload/", view(self.upload_view), name="jobtracking_job_upload"),
            path(
                "<uuid:pk>/results/<int:attempt>/",
                view(self.result_view),
                name="jobtracking_job_result",
            ),
            *super().get_urls(),
        ]

    def _visible_job(self, request, pk) -> ExtractionJob:
        # Only jobs in the staff member's reach: `get_object` reads the list's queryset.
        job = self.get_object(request, pk)
        if job is None:
            raise Http404
        if not self.has_view_permission(request, job):
            raise PermissionDenied
        return job

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        # The page's own parts, for the job Django has already fetched.
        if obj is not None:
            now = timezone.now()
            context.update(
                summary=summary(obj, now),
                timeline=timeline(obj, now),
                results=list(obj.results.order_by("-attempt")),
                # Shown to those who may view events, as Django shows an inline.
                events=(
                    list(obj.events.order_by("id"))
                    if request.user.has_perm("jobtracking.view_jobevent")
                    else None
                ),
                may_requeue=obj.is_terminal and self._may_act(request, obj, "requeue"),
                may_cancel=not obj.is_terminal and self._may_act(request, obj, "cancel"),
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _may_act(self, request, job, verb: str) -> bool:
        allowed = getattr(self, f"has_{verb}_permission")(request)
        return allowed and job_may_act(user=request.user, job=job)

    def _act_view(self, request, pk, verb: str, done: str, form_class, act):
        job = self._visible_job(request, pk)
        if not self._may_act(request, job, verb):
            raise PermissionDenied
        form = form_class(request.POST or None)
        if request.method == "POST" and form.is_valid():
            reason = form.cleaned_data["reason"]
            try:
                act(job, reason, form.cleaned_data)
            except ApplicationError as error:
                self.message_user(request, f"Not {done}: {error.message}", messages.ERROR)
            else:
                record(request, [job], f"{done.capitalize()}. {reason}".strip())
                self.message_user(request, f"Job {done}.", messages.SUCCESS)
            return redirect(reverse("admin:jobtracking_extractionjob_change", args=[job.pk]))
        context = {
            **self.admin_site.each_context(request),
            "title": f"{verb.capitalize()} job {job.pk}",
            "job": job,
            "verb": verb,
            "form": form,
            "opts": self.model._meta,
            "succeeded": job.status_id == states.SUCCEEDED,
        }
        return TemplateResponse(request, "admin/jobtracking/extractionjob/act.html", context)

    def requeue_view(self, request, pk):
        def act(job, reason, data) -> None:
            priority = Priority(int(data["priority"])) if data.get("priority") else None
            job_requeue(
                job_id=job.pk,
                actor=admin_actor(request),
                reason=reason,
                force=data["force"],
                priority=priority,
            )

        return self._act_view(request, pk, "requeue", "requeued", RequeueForm, act)

    def cancel_view(self, request, pk):
        def act(job, reason, data) -> None:
            job_cancel(job_id=job.pk, actor=admin_actor(request), reason=reason)

        return self._act_view(request, pk, "cancel", "cancelled", JobActForm, act)

    def upload_view(self, request, pk):
        job = self._visible_job(request, pk)
        if not job.upload:
            raise Http404("This job has no upload (it was sent by URL).")
        # An attachment, never rendered inline: the file is a client's, not ours.
        return FileResponse(
            job.upload.open("rb"),
            as_attachment=True,
            filename=job.file_name or job.upload.name.rsplit("/", 1)[-1],
            content_type=job.content_type or "application/octet-stream",
        )

    def result_view(self, request, pk, attempt):
        job = self._visible_job(request, pk)
        result = get_object_or_404(ExtractionResult, job=job, attempt=attempt)
        if request.GET.get("download") == "original" and result.original_file:
            # The extractor's answer as sent, kept when it had to be made safe: an attachment.
            return FileResponse(
                result.original_file.open("rb"),
                as_attachment=True,
                filename=f"{job.pk}-attempt-{attempt}-original.json",
                content_type="application/octet-stream",
            )
        payload = result.load_payload()
        pretty = json.dumps(payload, indent=2, ensure_ascii=False, sort_keys=True)
        if request.GET.get("download"):
            response = HttpResponse(pretty, content_type="application/json")
            response["Content-Disposition"] = (
                f'attachment; filename="{job.pk}-attempt-{attempt}.json"'
            )
            return response
        context = {
            **self.admin_site.each_context(request),
            "title": f"Result of job {job.pk}, attempt {attempt}",
            "job": job,
            "result": result,
            "received": moment(result.received_at),
            "view": result_document(job.extractor.adapter, payload),
            "pretty": pretty,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/jobtracking/extractionjob/result.html", context)
