"""Webhook endpoints in the API: a client's own subscriptions (input and output), their
deliveries with every attempt, and a test event's outcome."""

from rest_framework import serializers

from jobtracking import states
from jobtracking.api.serializers import StrictSerializer, UtcModelSerializer
from jobtracking.models import DeliveryAttempt, WebhookDelivery, WebhookSubscription
from jobtracking.selectors import VIEW_ALL
from jobtracking.webhooks.sending import Outcome, is_delivered

EVENT_TYPES_HELP = (
    "The event types to receive; empty only with `all_event_types` (an empty list alone is "
    "refused)."
)
ALL_EVENT_TYPES_HELP = (
    "Receive every event type, including ones added later (then `event_types` is empty)."
)
ALL_JOBS_HELP = (
    "Receive the events of every client's jobs (needs the view-all permission). Otherwise, "
    "only those of the jobs this client requested."
)


def event_types_field(**kwargs) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.ChoiceField(choices=states.EVENT_TYPES),
        help_text=EVENT_TYPES_HELP,
        **kwargs,
    )


# Output


class WebhookEndpointSerializer(UtcModelSerializer):
    event_types = event_types_field()
    all_event_types = serializers.BooleanField(help_text=ALL_EVENT_TYPES_HELP)
    enabled = serializers.BooleanField(source="active", help_text="Whether events are sent to it.")
    all_jobs = serializers.BooleanField(help_text=ALL_JOBS_HELP)

    class Meta:
        model = WebhookSubscription
        fields = [
            "id",
            "url",
            "description",
            "event_types",
            "all_event_types",
            "enabled",
            "all_jobs",
            "created_at",
            "updated_at",
        ]


class WebhookEndpointWithSecretSerializer(WebhookEndpointSerializer):
    """The endpoint and its signing secret: answered once, on creation or rotation."""

    secret = serializers.CharField(
        help_text="The signing secret (`whsec_…`), shown this once: verify each delivery's "
        "`webhook-signature` with it (Standard Webhooks)."
    )

    class Meta(WebhookEndpointSerializer.Meta):
        fields = [*WebhookEndpointSerializer.Meta.fields, "secret"]


class DeliveryAttemptSerializer(UtcModelSerializer):
    http_status = serializers.IntegerField(
        source="status_code", allow_null=True, help_text="The receiver's answer; null: none."
    )

    class Meta:
        model = DeliveryAttempt
        fields = ["attempted_at", "http_status", "error", "response_excerpt", "duration_ms"]


class WebhookDeliverySerializer(UtcModelSerializer):
    event_id = serializers.UUIDField(
        source="event.event_id", help_text="The `webhook-id` header it is sent with."
    )
    event_type = serializers.CharField(source="event.type")
    job = serializers.UUIDField(
        source="event.job_id", allow_null=True, help_text="The job of a job.* event; else null."
    )
    batch = serializers.UUIDField(
        source="event.batch_id",
        allow_null=True,
        help_text="The batch of a batch.* event; else null.",
    )
    attempts = DeliveryAttemptSerializer(
        source="attempt_log", many=True, help_text="Every POST of it, oldest first."
    )

    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "event_id",
            "event_type",
            "job",
            "batch",
            "state",
            "next_attempt_at",
            "delivered_at",
            "created_at",
            "attempts",
        ]


class WebhookTestResultSerializer(serializers.Serializer):
    delivered = serializers.BooleanField(help_text="The receiver answered 2xx.")
    http_status = serializers.IntegerField(allow_null=True)
    error = serializers.CharField(
        help_text="Empty if it was delivered; else one phrase, with the HTTP status when the "
        "receiver answered (whether a port refused, hung or spoke something else is not said)."
    )
    response_excerpt = serializers.CharField()
    duration_ms = serializers.IntegerField()

    @staticmethod
    def of(outcome: Outcome) -> dict:
        return {
            "delivered": is_delivered(outcome.status),
            "http_status": outcome.status,
            "error": outcome.error,
            "response_excerpt": outcome.excerpt,
            "duration_ms": outcome.duration_ms,
        }


# Input


class WebhookEndpointInputSerializer(StrictSerializer):
    """A new endpoint (POST) or the fields to change (PATCH: any of them, the endpoint as the
    `instance`). No field declares a default: the schema would show it on the PATCH body too,
    and generated clients send a schema's defaults, changing fields the caller never named. A
    new endpoint takes the model's."""

    url = serializers.URLField(
        max_length=2000,
        help_text="Where events are POSTed: http(s), reaching a public address.",
    )
    # Either, not both: a new endpoint names its event types or chooses all of them (the
    # model's `clean` says so, as in the admin).
    event_types = event_types_field(required=False)
    all_event_types = serializers.BooleanField(
        required=False, help_text=f"{ALL_EVENT_TYPES_HELP} Default: false."
    )
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False, help_text="Default: true.")
    all_jobs = serializers.BooleanField(
        required=False, help_text=f"{ALL_JOBS_HELP} Default: false."
    )

    def validate_event_types(self, types: list[str]) -> list[str]:
        return list(dict.fromkeys(types))

    def validate(self, data: dict) -> dict:
        # `selectors.visible`'s rule, fixed on the subscription: every job only for a client
        # that may see every job. Checked at every save (the endpoint being changed is the
        # `instance`), so that a client that lost the permission cannot go on changing an
        # endpoint that receives every client's events without giving that up.
        kept = self.instance is not None and self.instance.all_jobs
        if data.get("all_jobs", kept) and not self.context["request"].user.has_perm(VIEW_ALL):
            why = "Receiving every client's events needs the view_all_extractionjobs permission"
            if "all_jobs" not in data:
                why += ' (this endpoint receives them: send "all_jobs": false to change it)'
            raise serializers.ValidationError({"all_jobs": [f"{why}."]})
        return data

    def fields_to_save(self) -> dict:
        """The validated fields under the model's names."""
        fields = dict(self.validated_data)
        if "enabled" in fields:
            fields["active"] = fields.pop("enabled")
        return fields


class NoBodySerializer(StrictSerializer):
    """Commands that take nothing: a field sent is refused, not ignored."""
