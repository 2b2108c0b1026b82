"""What every page of the console shares: status badges, compact times, read-only admins, and
the admin's own log (LogEntry) of what staff did."""

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.db import models
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html

from jobtracking import states
from jobtracking.models import ActorType
from jobtracking.selectors import visible
from jobtracking.services import Actor

STATUS_COLOURS = {
    "pending": "#6c757d",
    "held": "#b58105",
    "submitting": "#0d6efd",
    "submitted": "#0d6efd",
    "processing": "#6610f2",
    "succeeded": "#198754",
    "failed": "#dc3545",
    "timed_out": "#fd7e14",
    "cancelled": "#495057",
}
STATUS_LABELS = {status.code: status.label for status in states.STATUSES}


def status_badge(code: str | None):
    if not code:
        return "—"
    return format_html(
        '<span class="status-badge" style="background:{};color:#fff;padding:2px 6px;'
        'border-radius:3px;white-space:nowrap">{}</span>',
        STATUS_COLOURS.get(code, "#333"),
        STATUS_LABELS.get(code, code),
    )


def moment(value: datetime | None) -> str:
    """A time to the second, with its date and zone: what an audit record needs. The format is
    Django's DATETIME_FORMAT (config/formats/), the one every other time in the console uses."""
    if value is None:
        return "—"
    return date_format(timezone.localtime(value), "DATETIME_FORMAT")


def span(value: timedelta | None) -> str:
    """A duration as people read it: 0.4 s, 12 s, 3 min 4 s, 2 h 5 min, 3 d 4 h."""
    if value is None:
        return "—"
    seconds = max(value.total_seconds(), 0.0)
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def ago(value: datetime | None, now: datetime | None = None) -> str:
    if value is None:
        return "—"
    return f"{span((now or timezone.now()) - value)} ago"


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


def job_link(job_id) -> str:
    """A job's short id (as the jobs list shows it) leading to its page."""
    url = reverse("admin:jobtracking_extractionjob_change", args=[job_id])
    return format_html('<a href="{}">{}</a>', url, str(job_id)[-12:])


def batch_link(batch_id) -> str:
    """A batch's short id leading to its page."""
    url = reverse("admin:jobtracking_batch_change", args=[batch_id])
    return format_html('<a href="{}">batch {}</a>', url, str(batch_id)[-12:])


def uuid_search(queryset: models.QuerySet, term: str, *fields: str) -> models.QuerySet:
    """Rows where one of `fields` is the UUID `term`: an index lookup each, never a scan; no
    rows when `term` is not a UUID."""
    try:
        value = uuid.UUID(term)
    except ValueError:
        return queryset.none()
    query = models.Q()
    for field in fields:
        query |= models.Q(**{field: value})
    return queryset.filter(query)


def record(request, objects: Iterable[models.Model], message: str, *, flag: int = CHANGE) -> None:
    """One LogEntry per object, so the object's History and the index's Recent actions show
    what staff did through actions and buttons (the services keep their own audit rows)."""
    objects = list(objects)
    if objects:
        LogEntry.objects.log_actions(
            user_id=request.user.pk, queryset=objects, action_flag=flag, change_message=message
        )


REQUEUE_NEEDS_A_REASON = (
    "Give a reason for the requeue (the Reason field): it costs another extraction, and each "
    "job's history records why."
)


def requeue_reason_given(modeladmin: admin.ModelAdmin, request) -> bool:
    """Whether a requeue list action came with a reason; if not, staff are told so and nothing
    is requeued."""
    if request.POST.get("reason", "").strip():
        return True
    modeladmin.message_user(request, REQUEUE_NEEDS_A_REASON, messages.ERROR)
    return False


class NoWrites:
    """History is written by services only: nobody, superusers included, edits it here."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyAdmin(NoWrites, admin.ModelAdmin):
    pass


class ReadOnlyInline(NoWrites, admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False


def admin_actor(request) -> Actor:
    """The staff member at the console, as the services record them."""
    return Actor(ActorType.ADMIN, request.user)


class JobScopedAdmin(ReadOnlyAdmin):
    """Rows derived from a job, shown only where their job is visible to the staff member
    (`selectors.visible`, the same rule as the API's), through the relation path `job_path`."""

    job_path: str | tuple[str, ...] = "job"

    def get_queryset(self, request):
        return visible(super().get_queryset(request), user=request.user, via=self.job_path)


def reason_field(what: str) -> forms.CharField:
    """The Reason a staff member gives for a change that `LoggedWithReason` logs."""
    return forms.CharField(
        max_length=500,
        help_text=f"Why {what}: it goes in the admin log with your name.",
    )


class LoggedWithReason:
    """A model admin whose form has a `reason` field (`reason_field`): every add and change is
    logged in the admin log with who made it and why."""

    def construct_change_message(self, request, form, formsets, add=False) -> str:
        what = "Set" if add else f"Changed {', '.join(form.changed_data) or 'nothing'}"
        return f"{what}: {form.instance}. Reason: {form.cleaned_data['reason']}"
