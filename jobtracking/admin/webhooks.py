"""Webhook subscriptions (event types as checkboxes, secrets shown once, a test event) and their
deliveries (what was sent, signature redacted; searchable; dead ones retried)."""

import contextlib
import json
import uuid

from django import forms
from django.contrib import admin, messages
from django.db.models import Q
from django.urls import reverse
from django.utils.html import format_html

from jobtracking import states
from jobtracking.admin.circuits import circuit_error_cell, circuit_state
from jobtracking.admin.common import JobScopedAdmin, moment, record
from jobtracking.admin.paging import EstimatedCountPaginator
from jobtracking.models import (
    DeliveryState,
    WebhookDelivery,
    WebhookSubscription,
)
from jobtracking.selectors import VIEW_ALL
from jobtracking.services.deliveries import delivery_retry
from jobtracking.services.subscriptions import subscription_rotate_secret
from jobtracking.webhooks import (
    delivery_body,
    delivery_headers,
    send_test_event,
    subscription_secret,
)


class SubscriptionForm(forms.ModelForm):
    event_types = forms.MultipleChoiceField(
        choices=[(t, t) for t in states.OUTBOX_EVENT_TYPES],
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="None ticked: every event type, including ones added later.",
    )

    class Meta:
        model = WebhookSubscription
        fields = ["url", "description", "event_types", "all_jobs", "active"]


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(admin.ModelAdmin):
    form = SubscriptionForm
    list_display = [
        "url",
        "description",
        "event_types",
        "active",
        "receiver_circuit",
        "receiver_error",
        "secret_version",
        "created_at",
    ]
    list_select_related = ["health"]
    search_fields = ["url", "description"]
    readonly_fields = [
        "receiver_circuit",
        "receiver_error",
        "secret_version",
        "created_by",
        "created_at",
        "updated_at",
    ]
    actions = ["rotate_secret", "send_test"]

    @admin.display(description="receiver")
    def receiver_circuit(self, subscription: WebhookSubscription) -> str:
        return circuit_state(getattr(subscription, "health", None))

    @admin.display(description="receiver's last error")
    def receiver_error(self, subscription: WebhookSubscription):
        return circuit_error_cell(getattr(subscription, "health", None))

    def get_queryset(self, request):
        # Staff who see only their own jobs manage only their own subscriptions, which receive
        # only those jobs' events.
        subscriptions = super().get_queryset(request)
        if request.user.has_perm(VIEW_ALL):
            return subscriptions
        return subscriptions.filter(created_by=request.user)

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        return fields if request.user.has_perm(VIEW_ALL) else [*fields, "all_jobs"]

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)
        twins = WebhookSubscription.objects.filter(url=obj.url).exclude(pk=obj.pk)
        if twins:
            self.message_user(
                request,
                f"Subscription(s) {', '.join(str(t.pk) for t in twins)} already send to "
                f"{obj.url}: events both subscribe to will be delivered to it more than once.",
                messages.WARNING,
            )
        if not change:
            self._show_secret(request, obj)

    def _show_secret(self, request, subscription):
        self.message_user(
            request,
            f"Signing secret for {subscription.url} (shown once, not stored): "
            f"{subscription_secret(subscription)}",
            messages.WARNING,
        )

    # Reveals a new secret and sends signed requests: change permission, never view alone.
    @admin.action(
        description="Rotate the signing secret and show the new one", permissions=["change"]
    )
    def rotate_secret(self, request, queryset):
        for subscription in queryset:
            subscription_rotate_secret(subscription)
            self._show_secret(request, subscription)
            record(
                request, [subscription], f"Secret rotated (version {subscription.secret_version})."
            )

    @admin.action(description="Send a signed test event now", permissions=["change"])
    def send_test(self, request, queryset):
        for subscription in queryset:
            status, excerpt, error = send_test_event(subscription)
            outcome = error or f"HTTP {status}"
            ok = status is not None and 200 <= status < 300
            self.message_user(
                request,
                f"Test event to {subscription.url}: {outcome}"
                + (f" ({excerpt[:200]})" if excerpt else ""),
                messages.SUCCESS if ok else messages.ERROR,
            )
            record(request, [subscription], f"Test event sent: {outcome}.")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(JobScopedAdmin):
    job_path = "event__job"
    list_display = [
        "id",
        "event_type",
        "job",
        "receiver",
        "state",
        "attempts",
        "http_status",
        "next_attempt",
        "delivered",
    ]
    list_filter = ["state", "subscription"]
    search_fields = ["subscription__url"]
    search_help_text = "An event id or job id (whole), an HTTP status, or the start of the URL."
    list_select_related = ["event", "subscription"]
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    actions = ["retry_dead"]
    fields = [
        "event_link",
        "subscription",
        "state",
        "attempts",
        "last_status_code",
        "last_error",
        "last_response_excerpt",
        "next_attempt_at",
        "delivered_at",
        "created_at",
        "sent_headers",
        "sent_body",
    ]
    readonly_fields = fields

    @admin.display(description="event", ordering="event__type")
    def event_type(self, delivery: WebhookDelivery) -> str:
        return delivery.event.type

    @admin.display(description="job")
    def job(self, delivery: WebhookDelivery):
        url = reverse("admin:jobtracking_extractionjob_change", args=[delivery.event.job_id])
        return format_html('<a href="{}">{}</a>', url, str(delivery.event.job_id)[-12:])

    @admin.display(description="receiver")
    def receiver(self, delivery: WebhookDelivery):
        url = delivery.subscription.url
        return format_html(
            '<span title="{}">{}</span>', url, url if len(url) <= 32 else url[:31] + "…"
        )

    @admin.display(description="HTTP", ordering="last_status_code")
    def http_status(self, delivery: WebhookDelivery):
        return delivery.last_status_code or "—"

    @admin.display(description="next attempt", ordering="next_attempt_at")
    def next_attempt(self, delivery: WebhookDelivery) -> str:
        return moment(delivery.next_attempt_at)

    @admin.display(description="delivered", ordering="delivered_at")
    def delivered(self, delivery: WebhookDelivery) -> str:
        return moment(delivery.delivered_at)

    @admin.display(description="event")
    def event_link(self, delivery: WebhookDelivery):
        return format_html(
            "{} <small>({})</small> — job {}",
            delivery.event.type,
            delivery.event.event_id,
            self.job(delivery),
        )

    @admin.display(description="headers sent")
    def sent_headers(self, delivery: WebhookDelivery):
        # The signature is a credential for this body: shown redacted, like every secret.
        headers = delivery_headers(
            str(delivery.event.event_id), "(the time of each attempt)", "v1,<redacted>"
        )
        return format_html("<pre>{}</pre>", "\n".join(f"{k}: {v}" for k, v in headers.items()))

    @admin.display(description="body sent")
    def sent_body(self, delivery: WebhookDelivery):
        body = json.loads(delivery_body(delivery.event))
        return format_html("<pre>{}</pre>", json.dumps(body, indent=2, ensure_ascii=False))

    def get_search_results(self, request, queryset, search_term):
        # Exact ids and a URL prefix: each is an index lookup, or the small subscriptions table.
        term = search_term.strip()
        if not term:
            return queryset, False
        query = Q(subscription__url__startswith=term)
        with contextlib.suppress(ValueError):
            value = uuid.UUID(term)
            query |= Q(event__event_id=value) | Q(event__job_id=value)
        if term.isascii() and term.isdigit() and len(term) == 3:
            query |= Q(last_status_code=int(term))
        return queryset.filter(query), False

    def has_retry_permission(self, request) -> bool:
        return request.user.has_perm("jobtracking.view_webhookdelivery") and request.user.has_perm(
            "jobtracking.change_webhooksubscription"
        )

    @admin.action(description="Retry selected dead deliveries", permissions=["retry"])
    def retry_dead(self, request, queryset):
        dead = list(queryset.filter(state=DeliveryState.DEAD))
        count = delivery_retry(queryset=queryset.filter(pk__in=[d.pk for d in dead]))
        record(request, dead, "Retried (was dead).")
        self.message_user(request, f"{count} dead delivery(ies) scheduled again.")
