"""`/api/v1/batches/`: the files of one grant request as one unit (`services.batches`)."""

import hashlib
import json

from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from jobtracking.api.bulk import (
    REPLAYED_HEADER,
    api_actor,
    bulk_results,
    check_priority,
    idempotency_key,
    validated,
)
from jobtracking.api.docs import batches_docs
from jobtracking.api.filters import BatchFilterSet
from jobtracking.api.pagination import KeysetCursorPagination
from jobtracking.api.parsers import SafeJSONParser
from jobtracking.api.permissions import BATCH_ACTIONS, ActionPermission
from jobtracking.api.serializers import (
    BatchCancelSerializer,
    BatchCreateResultSerializer,
    BatchCreateSerializer,
    BatchJobsResultSerializer,
    BatchJobsSerializer,
    BatchOperationResultSerializer,
    BatchRequeueSerializer,
    BatchSerializer,
)
from jobtracking.api.viewsets import ClientRowsViewSet
from jobtracking.errors import BatchNotFoundError
from jobtracking.models import Batch
from jobtracking.representation import batch_representation, batches_path, jobs_path
from jobtracking.selectors import batch_list, batch_summaries, job_may_act_on_batch
from jobtracking.services.batches import (
    NewBatch,
    batch_add_jobs,
    batch_cancel,
    batch_close,
    batch_create,
    batch_replayed,
    batch_requeue,
)

# Refused jobs a batch operation's answer names (it counts them all).
REFUSALS_SHOWN = 100


class Replayed(Exception):
    """A create found its Idempotency-Key used by a concurrent twin with the same request."""


class BatchCursorPagination(KeysetCursorPagination):
    ordering = ("-created_at",)


def new_batch(fields: dict, **request_fields) -> NewBatch:
    return NewBatch(**fields, **request_fields)


def batch_bodies(request, batches: list[Batch], *, with_failed_jobs: bool = False) -> list[dict]:
    """The batches as the API shows them, their aggregates read in one query."""
    summaries = batch_summaries([b.pk for b in batches], with_failed_jobs=with_failed_jobs)
    batches_url = request.build_absolute_uri(batches_path())
    jobs_url = request.build_absolute_uri(jobs_path())
    return [
        BatchSerializer(
            batch_representation(
                batch, summaries[batch.pk], batches_url=batches_url, jobs_url=jobs_url
            )
        ).data
        for batch in batches
    ]


def batch_body(request, batch: Batch, *, with_failed_jobs: bool = False) -> dict:
    (body,) = batch_bodies(request, [batch], with_failed_jobs=with_failed_jobs)
    return body


def body_fingerprint(data) -> str:
    """A digest of the request's body, to tell an idempotent replay from a reused key."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def operation_body(request, batch: Batch, outcome) -> dict:
    refusals = [
        {"job": pk, "code": error.code, "detail": error.message}
        for pk, error in list(outcome.refused.items())[:REFUSALS_SHOWN]
    ]
    return {
        "batch": batch_body(request, batch),
        "moved": len(outcome.moved),
        "refused": len(outcome.refused),
        "refusals": refusals,
    }


@batches_docs
@extend_schema(tags=["batches"])
class BatchViewSet(ClientRowsViewSet):
    """Batches: the jobs of one grant request, tracked as one unit."""

    model = Batch
    not_found = BatchNotFoundError
    not_found_message = "No batch {pk}, or not one this client may see."
    serializer_class = BatchSerializer
    permission_classes = [ActionPermission]
    action_permissions = BATCH_ACTIONS
    filterset_class = BatchFilterSet
    filter_backends = [DjangoFilterBackend]
    pagination_class = BatchCursorPagination
    parser_classes = [SafeJSONParser]
    lookup_value_regex = "[0-9a-fA-F-]{36}"

    # What each action reads: the browsable API builds its forms from these.
    action_serializers = {
        "create": BatchCreateSerializer,
        "jobs": BatchJobsSerializer,
        "cancel": BatchCancelSerializer,
        "requeue": BatchRequeueSerializer,
    }

    def rows(self, *, user):
        return batch_list(user=user)

    def get_actionable_object(self) -> Batch:
        """The batch, if the caller may also act on it (`job_may_act_on_batch`)."""
        batch = self.get_object()
        if not job_may_act_on_batch(user=self.request.user, batch=batch):
            raise PermissionDenied(
                "Acting on another client's batch needs the manage_all_extractionjobs permission."
            )
        return batch

    def list(self, request):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(batch_bodies(request, page))

    def retrieve(self, request, pk=None):
        return Response(batch_body(request, self.get_object(), with_failed_jobs=True))

    @extend_schema(
        request=BatchCreateSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="Replays with the same key and body return the batch (200).",
            )
        ],
        responses={201: BatchCreateResultSerializer, 200: BatchCreateResultSerializer},
    )
    def create(self, request):
        fields = validated(BatchCreateSerializer, request)
        jobs = fields.pop("jobs")
        key = idempotency_key(request)
        request_fields = (
            {"idempotency_key": key, "request_fingerprint": body_fingerprint(request.data)}
            if key
            else {}
        )
        new = new_batch(fields, **request_fields)
        actor = api_actor(request)
        if existing := batch_replayed(new, user=request.user):
            return self.replay(request, existing)
        made = {}

        def create(news):
            made["batch"] = batch_create(new, news, actor=actor)
            if not made["batch"].created:
                raise Replayed
            return made["batch"].outcomes

        try:
            body = bulk_results(request, jobs, create, always=True)
        except Replayed:  # a concurrent twin with the same key won
            return self.replay(request, made["batch"].batch)
        data = {"batch": batch_body(request, made["batch"].batch), **body}
        return Response(
            data,
            status=status.HTTP_201_CREATED,
            headers={"Location": data["batch"]["links"]["self"]},
        )

    def replay(self, request, batch: Batch) -> Response:
        """An idempotent replay: the batch as it is now, no item outcomes (the first answer
        had them; its jobs are listed by `links.jobs`)."""
        body = {"batch": batch_body(request, batch), "created": 0, "failed": 0, "results": []}
        return Response(body, headers={REPLAYED_HEADER: "true"})

    @extend_schema(request=BatchJobsSerializer, responses={200: BatchJobsResultSerializer})
    @action(detail=True, methods=["post"], filterset_class=None)
    def jobs(self, request, pk=None):
        """Add up to 500 jobs to an open batch."""
        batch = self.get_object()
        if batch.requested_by_id != request.user.pk:
            raise PermissionDenied("Only the batch's own client adds jobs to it.")
        items = validated(BatchJobsSerializer, request)["jobs"]
        actor = api_actor(request)
        # Called even with no valid item: a closed batch answers 409 whatever the items.
        body = bulk_results(
            request,
            items,
            lambda news: batch_add_jobs(batch_id=batch.pk, items=news, actor=actor),
            always=True,
        )
        return Response(body)

    @extend_schema(request=None, responses={200: BatchSerializer})
    @action(detail=True, methods=["post"], filterset_class=None)
    def close(self, request, pk=None):
        """Close the batch: it takes no more jobs, and completes once they have all ended."""
        batch = batch_close(batch_id=self.get_actionable_object().pk)
        return Response(batch_body(request, batch))

    @extend_schema(request=BatchCancelSerializer, responses={200: BatchOperationResultSerializer})
    @action(detail=True, methods=["post"], filterset_class=None)
    def cancel(self, request, pk=None):
        """Cancel the batch and its active jobs."""
        batch = self.get_actionable_object()
        data = validated(BatchCancelSerializer, request)
        outcome = batch_cancel(batch_id=batch.pk, actor=api_actor(request), reason=data["reason"])
        batch.refresh_from_db()
        return Response(operation_body(request, batch, outcome))

    @extend_schema(request=BatchRequeueSerializer, responses={200: BatchOperationResultSerializer})
    @action(detail=True, methods=["post"], filterset_class=None)
    def requeue(self, request, pk=None):
        """Requeue the batch's failed jobs (its succeeded ones too with `force`)."""
        batch = self.get_actionable_object()
        data = check_priority(request, validated(BatchRequeueSerializer, request))
        outcome = batch_requeue(batch_id=batch.pk, actor=api_actor(request), **data)
        batch.refresh_from_db()
        return Response(operation_body(request, batch, outcome))
