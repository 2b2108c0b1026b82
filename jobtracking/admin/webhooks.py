"""Webhook subscriptions (event types as checkboxes and labels, secrets shown once, a test event
and a new secret from the subscription's page, its recent deliveries) and their deliveries (what
was sent, signature redacted, every attempt; searchable; dead ones retried)."""

import json
import uuid

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST

from jobtracking import states
from jobtracking.admin.circuits import circuit_error_cell, circuit_state
from jobtracking.admin.common import JobScopedAdmin, ReadOnlyInline, moment, record
from jobtracking.admin.paging import EstimatedCountPaginator
from jobtracking.models import (
    DeliveryAttempt,
    DeliveryState,
    JobEvent,
    WebhookDelivery,
    WebhookSubscription,
)
from jobtracking.selectors import DELIVERY_OWNERS, VIEW_ALL, visible
from jobtracking.services.deliveries import delivery_retry
from jobtracking.services.subscriptions import subscription_rotate_secret
from jobtracking.webhooks.sending import (
    SubscriptionTestRunningError,
    delivery_body,
    delivery_headers,
    is_delivered,
    send_test_event,
    subscription_secret,
)

RECENT_DELIVERIES = 20


def event_type_labels(subscription: WebhookSubscription):
    """The subscription's event types as labels, or "every event type" when it chose all."""
    if subscription.all_event_types:
        return format_html('<span class="event-type all">{}</span>', "every event type")
    types = subscription.event_types or []
    return format_html_join(" ", '<span class="event-type">{}</span>', ((t,) for t in types))


class SubscriptionForm(forms.ModelForm):
    # Ticking none is refused (the model's `clean`): a receiver gets a type added later only
    # when it ticked "all event types".
    event_types = forms.MultipleChoiceField(
        choices=[(t, t) for t in states.OUTBOX_EVENT_TYPES],
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="The types to receive, unless all event types is ticked.",
    )

    class Meta:
        model = WebhookSubscription
        fields = ["url", "description", "all_event_types", "event_types", "all_jobs", "active"]


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(admin.ModelAdmin):
    form = SubscriptionForm
    list_display = [
        "url",
        "description",
        "event_type_list",
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
    # The same commands as buttons on the subscription's own page: URL name → method.
    BUTTONS = {"send-test": "_send_test", "rotate-secret": "_rotate"}

    class Media:
        css = {"all": ["jobtracking/admin/webhooks.css"]}

    @admin.display(description="event types")
    def event_type_list(self, subscription: WebhookSubscription):
        return event_type_labels(subscription)

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

    def _show_secret(self, request, subscription, *, rotated: bool = False):
        grace = (
            f" The previous secret also signs deliveries for "
            f"{settings.WEBHOOK_SECRET_GRACE_HOURS:g} hours: switch the receiver to this one "
            "before then."
            if rotated
            else ""
        )
        self.message_user(
            request,
            f"Signing secret for {subscription.url} (shown once, not stored): "
            f"{subscription_secret(subscription)}.{grace}",
            messages.WARNING,
        )

    def _rotate(self, request, subscription: WebhookSubscription) -> None:
        subscription_rotate_secret(subscription)
        self._show_secret(request, subscription, rotated=True)
        record(request, [subscription], f"Secret rotated (version {subscription.secret_version}).")

    def _send_test(self, request, subscription: WebhookSubscription) -> None:
        try:
            outcome = send_test_event(subscription)
        except SubscriptionTestRunningError:
            self.message_user(
                request,
                f"A test event to {subscription.url} is already on its way: one at a time.",
                messages.WARNING,
            )
            return
        said = outcome.error or f"HTTP {outcome.status}"
        self.message_user(
            request,
            f"Test event to {subscription.url}: {said}"
            + (f" ({outcome.excerpt[:200]})" if outcome.excerpt else ""),
            messages.SUCCESS if is_delivered(outcome.status) else messages.ERROR,
        )
        record(request, [subscription], f"Test event sent: {said}.")

    # Both reveal a new secret or send signed requests: change permission, never view alone.
    @admin.action(
        description="Rotate the signing secret and show the new one", permissions=["change"]
    )
    def rotate_secret(self, request, queryset):
        if request.POST.get("confirm") != "yes":
            return self._confirm_rotation(request, list(queryset))
        for subscription in queryset:
            self._rotate(request, subscription)
        return None

    @admin.action(description="Send a signed test event now", permissions=["change"])
    def send_test(self, request, queryset):
        for subscription in queryset:
            self._send_test(request, subscription)

    def get_urls(self):
        button = self.admin_site.admin_view(require_POST(self.button_view))
        own = [
            path(
                f"<path:object_id>/{name}/",
                button,
                {"command": name},
                name=f"jobtracking_webhooksubscription_{name.replace('-', '_')}",
            )
            for name in self.BUTTONS
        ]
        return own + super().get_urls()

    def button_view(self, request, object_id: str, command: str):
        subscription = self.get_object(request, unquote(object_id))
        if subscription is None:
            raise Http404("No such subscription, or not one of yours.")
        if not self.has_change_permission(request, subscription):
            raise PermissionDenied
        if command == "rotate-secret" and request.POST.get("confirm") != "yes":
            return self._confirm_rotation(request, [subscription])
        getattr(self, self.BUTTONS[command])(request, subscription)
        return redirect("admin:jobtracking_webhooksubscription_change", subscription.pk)

    def _confirm_rotation(self, request, subscriptions: list[WebhookSubscription]):
        """Ask before rotating: what changes for the receiver, and for how long the old secret
        still signs. Posted again with `confirm=yes` (and, from the list, the same action and
        selection), it rotates."""
        context = {
            **self.admin_site.each_context(request),
            "title": "Rotate the signing secret?",
            "opts": self.model._meta,
            "subscriptions": subscriptions,
            "grace_hours": settings.WEBHOOK_SECRET_GRACE_HOURS,
            "from_list": request.POST.get("action") == "rotate_secret",
        }
        return TemplateResponse(
            request, "admin/jobtracking/webhooksubscription/rotate_confirm.html", context
        )

    def change_view(self, request, object_id, form_url="", extra_context=None):
        subscription = self.get_object(request, unquote(object_id))
        context = {**(extra_context or {})}
        if subscription is not None:
            context["may_command"] = self.has_change_permission(request, subscription)
            context["recent_deliveries"] = self._recent_deliveries(request, subscription)
        return super().change_view(request, object_id, form_url, extra_context=context)

    def _recent_deliveries(self, request, subscription) -> list[WebhookDelivery]:
        deliveries = WebhookDelivery.objects.filter(subscription=subscription).select_related(
            "event"
        )
        recent = visible(deliveries, user=request.user, via=WebhookDeliveryAdmin.job_path).order_by(
            "-created_at", "-id"
        )
        return list(recent[:RECENT_DELIVERIES])


class DeliveryAttemptInline(ReadOnlyInline):
    """Every POST of the delivery, oldest first, as it went (append-only)."""

    model = DeliveryAttempt
    fields = ["attempted_at", "status_code", "error", "response_excerpt", "duration_ms"]
    readonly_fields = fields
    ordering = ["attempted_at", "id"]
    verbose_name_plural = "attempts"

    def has_view_permission(self, request, obj=None) -> bool:
        # Part of the delivery: whoever may see the delivery sees how each POST went.
        return request.user.has_perm("jobtracking.view_webhookdelivery")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(JobScopedAdmin):
    # An event is of a job, of a batch or of a client (usage): each makes the delivery visible.
    job_path = DELIVERY_OWNERS
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
    # Newest first, through `delivery_created_idx` (or the state or subscription one when
    # filtered), and never a COUNT(*) of the whole table: fast with millions of deliveries.
    ordering = ["-created_at", "-id"]
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    inlines = [DeliveryAttemptInline]
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

    @admin.display(description="job or batch")
    def job(self, delivery: WebhookDelivery):
        """The event's job, or its batch for a batch.* event."""
        event = delivery.event
        if event.job_id is None:
            url = reverse("admin:jobtracking_batch_change", args=[event.batch_id])
            return format_html('batch <a href="{}">{}</a>', url, str(event.batch_id)[-12:])
        url = reverse("admin:jobtracking_extractionjob_change", args=[event.job_id])
        return format_html('<a href="{}">{}</a>', url, str(event.job_id)[-12:])

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
        # A term is one kind of thing, each found through an index: an id among the events
        # (then their deliveries by `event`), a status, or a URL prefix among the few
        # subscriptions (then their deliveries by `subscription`). One OR across the joined
        # tables would read every delivery.
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            value = uuid.UUID(term)
        except ValueError:
            value = None
        if value is not None:
            events = JobEvent.objects.filter(Q(event_id=value) | Q(job_id=value))
            return queryset.filter(event__in=events.values("pk")), False
        if term.isascii() and term.isdigit() and len(term) == 3:
            found = queryset.filter(last_status_code=int(term))
            if not is_delivered(int(term)):
                # Only undelivered deliveries end on such a status (the same rows, then), and
                # `delivery_failing_status_idx` holds only those.
                found = found.exclude(state=DeliveryState.DELIVERED)
            return found, False
        receivers = WebhookSubscription.objects.filter(url__startswith=term)
        return queryset.filter(subscription__in=list(receivers.values_list("pk", flat=True))), False

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
