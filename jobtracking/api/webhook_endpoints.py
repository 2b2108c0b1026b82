"""`/api/v1/webhook_endpoints/`: a client's own webhook subscriptions, as Stripe's
`/v1/webhook_endpoints`: create, list, read, change, delete; rotate the signing secret; send a
signed test event; read the deliveries with every attempt; send one again. Another client's
endpoint does not exist for the caller (404 `webhook_endpoint_not_found`)."""

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import Throttled, ValidationError
from rest_framework.response import Response
from rest_framework.reverse import reverse

from jobtracking.api.pagination import KeysetCursorPagination
from jobtracking.api.parsers import SafeJSONParser
from jobtracking.api.permissions import ActionPermission
from jobtracking.api.viewsets import ClientRowsViewSet
from jobtracking.api.webhook_serializers import (
    NoBodySerializer,
    WebhookDeliverySerializer,
    WebhookEndpointInputSerializer,
    WebhookEndpointSerializer,
    WebhookEndpointWithSecretSerializer,
    WebhookTestResultSerializer,
)
from jobtracking.errors import WebhookDeliveryNotFoundError, WebhookEndpointNotFoundError
from jobtracking.models import WebhookSubscription
from jobtracking.selectors import webhook_delivery_list, webhook_endpoint_list
from jobtracking.services.deliveries import delivery_redeliver
from jobtracking.services.subscriptions import (
    subscription_create,
    subscription_delete,
    subscription_rotate_secret,
    subscription_update,
)
from jobtracking.webhooks.sending import (
    SubscriptionTestRunningError,
    send_test_event,
    subscription_secret,
)

VIEW = "jobtracking.view_webhooksubscription"
CHANGE = "jobtracking.change_webhooksubscription"
WEBHOOK_ACTIONS = {
    "list": VIEW,
    "retrieve": VIEW,
    "deliveries": VIEW,
    "create": "jobtracking.add_webhooksubscription",
    "partial_update": CHANGE,
    "rotate_secret": CHANGE,
    "test": CHANGE,
    "redeliver": CHANGE,
    "destroy": "jobtracking.delete_webhooksubscription",
}


class EndpointCursorPagination(KeysetCursorPagination):
    ordering = ("-created_at",)


class DeliveryCursorPagination(KeysetCursorPagination):
    ordering = ("-created_at",)


SECRET_ONCE = (
    " The answer carries the signing secret (`secret`), this once: store it, it is never shown "
    "again (rotate it to get a new one)."
)
# The routes' pattern only allows digits: an integer, for clients generated from the schema.
ENDPOINT_ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="The endpoint's id.")
webhook_endpoints_docs = extend_schema_view(
    list=extend_schema(
        summary="List webhook endpoints",
        description="This client's own webhook endpoints, newest first, a cursor page at a time "
        "(secrets are never listed).",
    ),
    retrieve=extend_schema(
        parameters=[ENDPOINT_ID],
        summary="Get a webhook endpoint",
        description="One of this client's endpoints: its URL, event types and whether it is "
        "enabled (not its secret).",
    ),
    create=extend_schema(
        summary="Create a webhook endpoint",
        description="Events of the jobs this client may see are POSTed to `url`, signed per "
        "Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`), at least "
        "once, retried for about a day. The URL must be http(s) and reach a public address."
        + SECRET_ONCE,
    ),
    partial_update=extend_schema(
        parameters=[ENDPOINT_ID],
        summary="Change a webhook endpoint",
        description="Change any of `url`, `event_types`, `all_event_types`, `description`, "
        "`enabled`, `all_jobs`; the others stay. A disabled endpoint receives no new events.",
    ),
    destroy=extend_schema(
        parameters=[ENDPOINT_ID],
        summary="Delete a webhook endpoint",
        description="No more events go to it; its deliveries and their attempts are deleted.",
    ),
)


DELIVERY_ID = OpenApiParameter(
    "delivery_id", int, OpenApiParameter.PATH, description="A delivery's `id`."
)


@webhook_endpoints_docs
@extend_schema(tags=["webhooks"])
class WebhookEndpointViewSet(ClientRowsViewSet):
    """A client's webhook endpoints (its own subscriptions)."""

    model = WebhookSubscription
    not_found = WebhookEndpointNotFoundError
    not_found_message = "No webhook endpoint {pk} among this client's."
    serializer_class = WebhookEndpointSerializer
    permission_classes = [ActionPermission]
    action_permissions = WEBHOOK_ACTIONS
    pagination_class = EndpointCursorPagination
    parser_classes = [SafeJSONParser]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    lookup_value_regex = "[0-9]+"

    # What each action reads: the browsable API builds its forms from these.
    action_serializers = {
        "create": WebhookEndpointInputSerializer,
        "partial_update": WebhookEndpointInputSerializer,
        "rotate_secret": NoBodySerializer,
        "test": NoBodySerializer,
        "redeliver": NoBodySerializer,
        "deliveries": WebhookDeliverySerializer,
    }

    def rows(self, *, user):
        return webhook_endpoint_list(user=user)

    def _input(self, subscription: WebhookSubscription | None = None) -> dict:
        """The fields to save: all of a new endpoint's, or those to change of `subscription`."""
        serializer = WebhookEndpointInputSerializer(
            subscription,
            data=self.request.data,
            partial=subscription is not None,
            context={"request": self.request},
        )
        serializer.is_valid(raise_exception=True)
        return serializer.fields_to_save()

    def _no_body(self) -> None:
        NoBodySerializer(data=self.request.data).is_valid(raise_exception=True)

    def _with_secret(self, subscription: WebhookSubscription) -> dict:
        subscription.secret = subscription_secret(subscription)
        return WebhookEndpointWithSecretSerializer(subscription).data

    @extend_schema(
        request=WebhookEndpointInputSerializer,
        responses={201: WebhookEndpointWithSecretSerializer},
    )
    def create(self, request):
        fields = self._input()
        try:
            subscription = subscription_create(owner=request.user, **fields)
        except DjangoValidationError as error:
            raise ValidationError(error.message_dict) from None
        location = reverse("api:webhook_endpoint-detail", args=[subscription.pk], request=request)
        return Response(
            self._with_secret(subscription),
            status=status.HTTP_201_CREATED,
            headers={"Location": location},
        )

    @extend_schema(
        request=WebhookEndpointInputSerializer, responses={200: WebhookEndpointSerializer}
    )
    def partial_update(self, request, pk=None):
        subscription = self.get_object()
        fields = self._input(subscription)
        try:
            subscription_update(subscription=subscription, **fields)
        except DjangoValidationError as error:
            raise ValidationError(error.message_dict) from None
        return Response(WebhookEndpointSerializer(subscription).data)

    def destroy(self, request, pk=None):
        subscription_delete(subscription=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Rotate an endpoint's signing secret",
        description="A new secret, answered this once. For `WEBHOOK_SECRET_GRACE_HOURS` (24 by "
        "default) every delivery is signed with the old and the new secret (two signatures in "
        "`webhook-signature`; either verifies), so the receiver switches without a gap; then "
        "with the new one alone.",
        request=None,
        responses={200: WebhookEndpointWithSecretSerializer},
        parameters=[ENDPOINT_ID],
    )
    @action(detail=True, methods=["post"])
    def rotate_secret(self, request, pk=None):
        subscription = self.get_object()
        self._no_body()
        subscription_rotate_secret(subscription)
        return Response(self._with_secret(subscription))

    @extend_schema(
        summary="Send a test event",
        description="POST a `webhook.test` event to the endpoint now, signed as every delivery "
        "is, and answer how it went: whether the receiver answered 2xx within a few seconds, "
        "with its status and the start of its answer if it answered in HTTP; a failure says "
        "nothing more. One test at a time per endpoint (429 `throttled` while one is on its "
        "way). Nothing is recorded or retried; a disabled endpoint is sent it too.",
        request=None,
        responses={200: WebhookTestResultSerializer},
        parameters=[ENDPOINT_ID],
    )
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        subscription = self.get_object()
        self._no_body()
        try:
            outcome = send_test_event(subscription)
        except SubscriptionTestRunningError as running:
            raise Throttled(wait=settings.WEBHOOK_TEST_TIMEOUT, detail=str(running)) from None
        return Response(WebhookTestResultSerializer(WebhookTestResultSerializer.of(outcome)).data)

    @extend_schema(
        summary="List an endpoint's deliveries",
        description="The endpoint's deliveries, newest first, a cursor page at a time; each "
        "with every attempt (when, the receiver's HTTP status, what failed with its cause and "
        "host, the start of the answer, how long it took). `state`: pending (on its way or "
        "waiting for a retry), delivered, or dead (retries exhausted: redeliver it).",
        responses={200: WebhookDeliverySerializer(many=True)},
        parameters=[ENDPOINT_ID],
    )
    @action(detail=True, methods=["get"], pagination_class=DeliveryCursorPagination)
    def deliveries(self, request, pk=None):
        deliveries = webhook_delivery_list(user=request.user, subscription=self.get_object())
        page = self.paginate_queryset(deliveries)
        return self.get_paginated_response(WebhookDeliverySerializer(page, many=True).data)

    @extend_schema(
        summary="Redeliver a delivery",
        description="Send one delivery again, whatever its state: it becomes pending, due now, "
        "with a fresh retry schedule; its earlier attempts stay listed. Answers 202 with the "
        "delivery; follow it in the endpoint's deliveries.",
        request=None,
        parameters=[ENDPOINT_ID, DELIVERY_ID],
        responses={202: WebhookDeliverySerializer},
    )
    @action(
        detail=True,
        methods=["post"],
        url_path=r"deliveries/(?P<delivery_id>[0-9]+)/redeliver",
    )
    def redeliver(self, request, pk=None, delivery_id=None):
        subscription = self.get_object()
        self._no_body()
        delivery = (
            webhook_delivery_list(user=request.user, subscription=subscription)
            .filter(pk=delivery_id)
            .first()
        )
        if delivery is None:
            raise WebhookDeliveryNotFoundError(
                f"Webhook endpoint {subscription.pk} has no delivery {delivery_id}."
            )
        delivery_redeliver(delivery=delivery)
        return Response(WebhookDeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)
