"""Circuits (`jobtracking.services.circuits`) as staff read them: the extractors and
subscriptions admins and the dashboard."""

from datetime import datetime

from django.utils import timezone
from django.utils.html import format_html

from jobtracking.admin.common import ago
from jobtracking.models import Circuit, CircuitState


def clock(value: datetime, now: datetime | None = None) -> str:
    """A time of today as 12:03:04 UTC; an older one with its date."""
    local, today = timezone.localtime(value), timezone.localtime(now or timezone.now()).date()
    return local.strftime("%H:%M:%S %Z" if local.date() == today else "%Y-%m-%d %H:%M:%S %Z")


def circuit_state(health: Circuit | None, now: datetime | None = None) -> str:
    """In words: "working", "open since 12:03:04 UTC" or "paused since 12:03:04 UTC: <reason>".
    No row means working: rows are created at the first failure or pause."""
    if health is None or health.state == CircuitState.CLOSED:
        return "working"
    since = clock(health.since, now)
    if health.state == CircuitState.PAUSED:
        return f"paused since {since}: {health.reason or '(no reason given)'}"
    return f"open since {since}"


def circuit_error(health: Circuit | None, now: datetime | None = None, limit: int = 0) -> str:
    """The last failed call's error and how long ago (kept after the circuit closes)."""
    if health is None or not health.last_error:
        return "—"
    text = health.last_error
    if limit and len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{ago(health.last_error_at, now)}: {text}"


def circuit_error_cell(health: Circuit | None):
    """For a list: the error cut short, whole in the tooltip."""
    return format_html(
        '<span title="{}">{}</span>', circuit_error(health), circuit_error(health, limit=80)
    )
