from datetime import UTC

import django_filters
from django import forms
from django_filters.fields import IsoDateTimeField

from extraction.errors import ErrorCode
from jobtracking import batch_states, states
from jobtracking.api.messages import plain_choices
from jobtracking.models import Batch, ExtractionJob, JobEvent, Priority
from jobtracking.selectors import batch_status_filter, job_search


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 date-time, converted to UTC here: PostgreSQL refuses offsets beyond ±15:59,
    and a far-off offset can push a date out of range."""

    def to_python(self, value):
        moment = super().to_python(value)
        if moment is None:
            return None
        try:
            return moment.astimezone(UTC)
        except OverflowError:
            raise forms.ValidationError("The date-time is out of range.") from None


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


class PlainFilterSet(django_filters.FilterSet):
    """A filter set whose fields' messages are plain English (`jobtracking.api.messages`)."""

    def get_form_class(self):
        form_class = super().get_form_class()
        for field in form_class.base_fields.values():
            plain_choices(field)
        return form_class


class JobFilterSet(PlainFilterSet):
    # distinct=False: the default SELECT DISTINCT costs a sort over every matching row.
    status = django_filters.MultipleChoiceFilter(
        distinct=False,
        choices=[(status.code, status.label) for status in states.STATUSES],
        help_text="One or more statuses (repeat the parameter).",
    )
    extractor = django_filters.CharFilter(field_name="extractor__slug", help_text="Slug.")
    priority = django_filters.ChoiceFilter(
        choices=[(p.code, p.label) for p in Priority], method="filter_priority", label="Priority"
    )
    file_id = django_filters.CharFilter()
    external_job_id = django_filters.CharFilter()
    error_code = django_filters.ChoiceFilter(choices=ErrorCode.choices)
    requested_by = django_filters.CharFilter(
        field_name="requested_by__username", help_text="Username of the requesting client."
    )
    batch = django_filters.UUIDFilter(field_name="batch_id", help_text="A batch's id.")
    created_after = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="lt")
    completed_after = UtcIsoDateTimeFilter(field_name="completed_at", lookup_expr="gte")
    completed_before = UtcIsoDateTimeFilter(field_name="completed_at", lookup_expr="lt")
    search = django_filters.CharFilter(
        method="filter_search",
        label="Search",
        help_text="A job id (whole, or its last 12 characters), file id or external id (exact), "
        "or the start of a file name.",
    )

    class Meta:
        model = ExtractionJob
        fields = []

    def filter_priority(self, queryset, name, value):
        return queryset.filter(priority=Priority.named(value))

    def filter_search(self, queryset, name, value):
        return job_search(queryset, value)


class EventFilterSet(django_filters.FilterSet):
    after = django_filters.NumberFilter(
        field_name="id", lookup_expr="gt", help_text="Only events with a larger id (the cursor)."
    )
    type = django_filters.MultipleChoiceFilter(
        distinct=False, choices=[(t, t) for t in states.OUTBOX_EVENT_TYPES]
    )
    job = django_filters.UUIDFilter(field_name="job_id")

    class Meta:
        model = JobEvent
        fields = []


class BatchFilterSet(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(
        choices=[(status, status) for status in batch_states.STATUSES], method="filter_status"
    )
    client_reference = django_filters.CharFilter()

    class Meta:
        model = Batch
        fields = []

    def filter_status(self, queryset, name, value):
        return queryset.filter(batch_status_filter(value))
