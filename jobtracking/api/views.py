import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.http import HttpResponse
from django.urls import reverse
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from prometheus_client import CONTENT_TYPE_LATEST
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.filters import OrderingFilter
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.routers import APIRootView
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

from extraction.models import Extractor
from jobtracking import states
from jobtracking.api.batch_views import batch_body, new_batch
from jobtracking.api.bulk import (
    REPLAYED_HEADER,
    api_actor,
    bulk_results,
    check_priority,
    idempotency_key,
    validated,
)
from jobtracking.api.docs import (
    events_docs,
    extractors_docs,
    healthz_docs,
    jobs_docs,
    readyz_docs,
    stats_docs,
    statuses_docs,
)
from jobtracking.api.errors import problem
from jobtracking.api.filters import EventFilterSet, JobFilterSet
from jobtracking.api.markup import render as render_markup
from jobtracking.api.metrics import DatabaseCollector
from jobtracking.api.pagination import KeysetCursorPagination
from jobtracking.api.parsers import SafeJSONParser
from jobtracking.api.permissions import JOB_ACTIONS, ActionPermission
from jobtracking.api.query import StrictQueryParameters
from jobtracking.api.serializers import (
    BulkCreateSerializer,
    BulkResultSerializer,
    ExtractionJobCreateSerializer,
    ExtractionJobJsonCreateSerializer,
    ExtractionJobSerializer,
    ExtractionResultSerializer,
    ExtractorSerializer,
    JobActionSerializer,
    JobEventSerializer,
    JobRequeueSerializer,
    JobStatusChangeSerializer,
    JobStatusSerializer,
    StatsSerializer,
    create_checker,
    request_fingerprint,
)
from jobtracking.api.viewsets import ClientRowsViewSet
from jobtracking.errors import (
    JobEndedWithoutResultError,
    JobNotFoundError,
    JobValidationError,
    ResultNotReadyError,
)
from jobtracking.infra.filetypes import HEAD_BYTES, content_matches
from jobtracking.infra.metrics import render as render_metrics
from jobtracking.models import (
    CircuitState,
    ExtractionJob,
    ExtractorHealth,
    JobEvent,
    JobStatus,
)
from jobtracking.selectors import (
    LIVENESS_WINDOWS,
    event_feed_position,
    event_list,
    heartbeats,
    job_list,
    job_may_act,
    job_stats,
)
from jobtracking.services import (
    NewJob,
    job_cancel,
    job_create,
    job_create_idempotent,
    job_create_many,
    job_requeue,
)
from jobtracking.services.batches import batch_create

logger = logging.getLogger(__name__)


class JobCursorPagination(KeysetCursorPagination):
    ordering = ("-created_at",)


class EventCursorPagination(KeysetCursorPagination):
    ordering = ("id",)
    page_size = 100


@jobs_docs
@extend_schema(tags=["jobs"])
class ExtractionJobViewSet(ClientRowsViewSet):
    """Extraction jobs: one request to one extractor for one file."""

    model = ExtractionJob
    not_found = JobNotFoundError
    not_found_message = "No job {pk}, or not one this client may see."
    serializer_class = ExtractionJobSerializer
    permission_classes = [ActionPermission]
    action_permissions = JOB_ACTIONS
    filterset_class = JobFilterSet
    filter_backends = [DjangoFilterBackend, OrderingFilter]
    ordering_fields = ["created_at", "updated_at"]
    pagination_class = JobCursorPagination
    query_parameters = {"result": {"attempt"}}
    lookup_value_regex = "[0-9a-fA-F-]{36}"

    # What each action reads: the browsable API builds its forms from these.
    action_serializers = {
        "create": ExtractionJobCreateSerializer,
        "bulk": BulkCreateSerializer,
        "cancel": JobActionSerializer,
        "requeue": JobRequeueSerializer,
    }

    def rows(self, *, user):
        return job_list(user=user)

    def get_actionable_object(self) -> ExtractionJob:
        """The job, if the caller may also act on it (see `job_may_act`)."""
        job = self.get_object()
        if not job_may_act(user=self.request.user, job=job):
            raise PermissionDenied(
                "Cancelling or requeueing another client's job needs the "
                "manage_all_extractionjobs permission."
            )
        return job

    @extend_schema(
        request={
            "application/json": ExtractionJobJsonCreateSerializer,
            "multipart/form-data": ExtractionJobCreateSerializer,
        },
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="Replays with the same key and body return the original job.",
            ),
            OpenApiParameter(
                REPLAYED_HEADER,
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                enum=["true"],
                response=[200],
                description="`true` on a replay of an earlier create (the original job, 200); "
                "absent when this request created the job (201).",
            ),
        ],
        responses={201: ExtractionJobSerializer, 200: ExtractionJobSerializer},
    )
    def create(self, request):
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
        if declared > settings.JOBS_UPLOAD_MAX_BYTES + (1 << 20):
            # Refused before reading the body.
            return too_large()
        validated = check_priority(request, create_checker().run_validation(request.data))
        upload = validated.get("upload")
        if upload is not None:
            if upload.size > settings.JOBS_UPLOAD_MAX_BYTES:
                return too_large()
            if validated["content_type"] not in settings.JOBS_UPLOAD_CONTENT_TYPES:
                return problem(
                    415,
                    "unsupported_media_type",
                    f"Files of type {validated['content_type'] or 'unknown'} are not accepted.",
                    accepted=settings.JOBS_UPLOAD_CONTENT_TYPES,
                )
            if not content_matches(validated["content_type"], upload_head(upload)):
                return problem(
                    415,
                    "content_mismatch",
                    f"The file's content is not {validated['content_type']}.",
                )
        key = idempotency_key(request)
        if key:
            new = NewJob(
                **validated, idempotency_key=key, request_fingerprint=request_fingerprint(validated)
            )
            job, created = job_create_idempotent(new, actor=api_actor(request))
        else:
            job, created = job_create(NewJob(**validated), actor=api_actor(request)), True
        data = ExtractionJobSerializer(job, context={"request": request}).data
        if not created:
            return Response(data, headers={REPLAYED_HEADER: "true"})
        return Response(
            data, status=status.HTTP_201_CREATED, headers={"Location": data["links"]["self"]}
        )

    @extend_schema(request=BulkCreateSerializer, responses={200: BulkResultSerializer})
    @action(detail=False, methods=["post"], parser_classes=[SafeJSONParser])
    def bulk(self, request):
        """Create up to 500 jobs (URL sources) in one transaction; each item has its outcome.
        With `batch`, they are created in a new batch."""
        envelope = validated(BulkCreateSerializer, request)
        fields = envelope.get("batch")
        if fields is None:
            body = bulk_results(
                request,
                envelope["jobs"],
                lambda news: job_create_many(news, actor=api_actor(request)),
            )
            return Response({**body, "batch": None})
        made = {}

        def create(news):
            made["batch"] = batch_create(new_batch(fields), news, actor=api_actor(request))
            return made["batch"].outcomes

        body = bulk_results(request, envelope["jobs"], create, always=True)
        return Response({**body, "batch": batch_body(request, made["batch"].batch)})

    @extend_schema(responses={200: JobStatusChangeSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def history(self, request, pk=None):
        """The job's status changes, oldest first (append-only audit trail)."""
        job = self.get_object()
        changes = job.status_changes.select_related("actor").order_by("changed_at", "id")
        return Response(JobStatusChangeSerializer(changes, many=True).data)

    @extend_schema(
        parameters=[OpenApiParameter("attempt", int, description="Default: latest successful")],
        responses={200: ExtractionResultSerializer},
    )
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def result(self, request, pk=None):
        """The extracted result of the latest successful attempt, or of `?attempt=`."""
        job = self.get_object()
        results = job.results.order_by("-attempt")
        attempt = request.query_params.get("attempt")
        if attempt is not None:
            if not (attempt.isascii() and attempt.isdigit()):
                raise JobValidationError({"attempt": "Must be a positive integer."})
            results = results.filter(attempt=int(attempt))
        found = results.first()
        if found is None and attempt:
            raise NotFound(f"This job has no result for attempt {attempt}.")
        if found is None and job.status_id in states.TERMINAL:
            raise JobEndedWithoutResultError(
                f"The job ended without a result: it is {job.status_id}. Its error says why; "
                "requeue it to try again.",
                job_status=job.status_id,
            )
        if found is None:
            raise ResultNotReadyError(
                f"The job has no result yet: it is {job.status_id}.", job_status=job.status_id
            )
        return Response(ExtractionResultSerializer(found).data)

    # Cancel and requeue are documented as JSON only: the browsable API's forms post to them too,
    # but one schema under three media types makes generated clients send multipart as a form.
    @extend_schema(
        request={"application/json": JobActionSerializer},
        responses={200: ExtractionJobSerializer},
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def cancel(self, request, pk=None):
        """Cancel an active job (and ask the extractor to drop it)."""
        job = self.get_actionable_object()
        data = validated(JobActionSerializer, request)
        job = job_cancel(job_id=job.pk, actor=api_actor(request), reason=data["reason"])
        return Response(ExtractionJobSerializer(job, context={"request": request}).data)

    @extend_schema(
        request={"application/json": JobRequeueSerializer},
        responses={200: ExtractionJobSerializer},
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def requeue(self, request, pk=None):
        """Run a terminal job again as a new attempt; a succeeded job needs `force`."""
        job = self.get_actionable_object()
        data = check_priority(request, validated(JobRequeueSerializer, request))
        job = job_requeue(job_id=job.pk, actor=api_actor(request), **data)
        return Response(ExtractionJobSerializer(job, context={"request": request}).data)


def upload_head(upload) -> bytes:
    head = upload.read(HEAD_BYTES)
    upload.seek(0)
    return head


def too_large() -> Response:
    limit = settings.JOBS_UPLOAD_MAX_BYTES
    return problem(413, "payload_too_large", f"Uploads are limited to {limit} bytes.", limit=limit)


@extractors_docs
@extend_schema(tags=["extractors"])
class ExtractorViewSet(StrictQueryParameters, viewsets.ReadOnlyModelViewSet):
    """Configured extractors (reference data; keys are never shown)."""

    queryset = Extractor.objects.select_related("health").order_by("slug")
    serializer_class = ExtractorSerializer
    permission_classes = [ActionPermission]
    action_permissions = {
        "list": "extraction.view_extractor",
        "retrieve": "extraction.view_extractor",
    }
    lookup_field = "slug"
    lookup_value_regex = "[-a-zA-Z0-9_]+"
    pagination_class = None


@statuses_docs
@extend_schema(tags=["statuses"])
class JobStatusViewSet(StrictQueryParameters, viewsets.ReadOnlyModelViewSet):
    """The lifecycle's statuses (reference data)."""

    queryset = JobStatus.objects.order_by("position")
    serializer_class = JobStatusSerializer
    permission_classes = [IsAuthenticated]
    lookup_field = "code"
    lookup_value_regex = "[a-z_]+"
    pagination_class = None


@events_docs
@extend_schema(tags=["events"])
class JobEventViewSet(StrictQueryParameters, mixins.ListModelMixin, viewsets.GenericViewSet):
    """The event feed (transactional outbox), oldest first. Page with `after=<last id seen>` or
    the `next` cursor; `latest/` gives where to tail it from now. Events appear once they are a
    second old, so ids never arrive out of order."""

    serializer_class = JobEventSerializer
    permission_classes = [ActionPermission]
    action_permissions = {
        "list": "jobtracking.view_extractionjob",
        "latest": "jobtracking.view_extractionjob",
    }
    filterset_class = EventFilterSet
    pagination_class = EventCursorPagination

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return JobEvent.objects.none()
        return event_list(user=self.request.user, settle=feed_settle())

    @action(detail=False, methods=["get"], pagination_class=None, filterset_class=None)
    def latest(self, request):
        """Where the feed is now: tail it from `next` (`after` = the newest settled event's id)
        to get only what is published from now on, without paging through the past."""
        position = event_feed_position(settle=feed_settle())
        feed = request.build_absolute_uri(reverse("api:event-list"))
        return Response({"after": position, "next": replace_query_param(feed, "after", position)})


def feed_settle() -> timedelta:
    return timedelta(seconds=settings.JOBS_EVENT_FEED_SETTLE_SECONDS)


class ServiceRootView(APIRootView):
    """The browsable API's home: what the service is, where its documentation is, and a link to
    each endpoint (the JSON answer has them too)."""

    DESCRIPTION = (
        "The system of record for document-extraction jobs: each job asks an external "
        "extractor to extract one file; background workers submit it and poll it until it is "
        "done, and its whole history is kept. Create jobs at `jobs/` (a file upload or a "
        "`source_url`), follow them there or through `events/` and signed webhooks.\n\n"
        "Documentation: [Swagger UI]({docs}), the [OpenAPI document]({schema}) and every "
        "error `code` at [problem codes]({problems}). Requests need `Authorization: Token "
        "<key>` or an admin session."
    )
    PAGES = {
        "stats": "api:stats",
        "usage": "api:usage",
        "docs": "docs",
        "schema": "schema",
        "problems": "problems",
    }

    def get_view_name(self) -> str:
        return "Extraction job tracking API"

    def get_view_description(self, html: bool = False) -> str:
        text = self.DESCRIPTION.format(**{name: reverse(url) for name, url in self.PAGES.items()})
        return render_markup(text) if html else text

    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        for name, url_name in self.PAGES.items():
            response.data[name] = request.build_absolute_uri(reverse(url_name))
        return response


class StatsView(StrictQueryParameters, APIView):
    """Counts by status and extractor, success rate and turnaround percentiles over a window
    (jobs the caller may see)."""

    query_parameters = {"window_hours"}

    permission_classes = [ActionPermission]
    action_permissions = {"GET": "jobtracking.view_extractionjob"}

    @stats_docs
    @extend_schema(
        parameters=[OpenApiParameter("window_hours", int, description="1 to 720, default 24")],
        responses={200: StatsSerializer},
    )
    def get(self, request):
        window = stats_window(request.query_params.get("window_hours", "24"))
        return Response(stats_answer(job_list(user=request.user), window))


def stats_window(raw: str) -> timedelta:
    """The stats' window from its `window_hours` (the API's parameter, `job_stats`' option)."""
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= 720:
        raise JobValidationError({"window_hours": "An integer from 1 to 720."})
    return timedelta(hours=int(raw))


def stats_answer(jobs, window: timedelta) -> dict:
    """What `GET /stats/` answers about `jobs` (`manage.py job_stats` prints the same)."""
    return StatsSerializer(job_stats(jobs=jobs, window=window)).data


class HealthzView(APIView):
    """Liveness: the process answers. The only anonymous endpoint."""

    authentication_classes = []
    permission_classes = [AllowAny]
    throttle_classes = []

    @healthz_docs
    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        return Response({"status": "ok"})


class ReadyzView(APIView):
    """Readiness: the database answers, a worker cluster and a dispatcher have beaten recently.
    Extractors whose circuit is open or paused make it `degraded`, never unready: restarting
    this service would not bring an extractor back, and its jobs only wait."""

    throttle_classes = []

    @readyz_docs
    @extend_schema(responses={200: OpenApiTypes.OBJECT, 503: OpenApiTypes.OBJECT})
    def get(self, request):
        checks = {}
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            checks["database"] = {"ok": True}
        except Exception as error:  # any failure means not ready; say which kind
            checks["database"] = {"ok": False, "error": type(error).__name__}
        if checks["database"]["ok"]:
            for kind, within in LIVENESS_WINDOWS.items():
                alive = heartbeats(kind=kind, within=within)
                # Host names are for staff; clients learn only how many are alive.
                names = [beat.name for beat in alive] if request.user.is_staff else len(alive)
                checks[kind] = {"ok": bool(alive), "alive": names}
        failing = [name for name, check in checks.items() if not check["ok"]]
        degraded = False
        if checks["database"]["ok"]:
            holding = (
                ExtractorHealth.objects.exclude(state=CircuitState.CLOSED)
                .select_related("extractor")
                .order_by("extractor__slug")
            )
            circuits = [
                {"slug": h.extractor.slug, "state": h.state, "since": h.since} for h in holding
            ]
            degraded = bool(circuits)
            checks["extractors"] = {"ok": not degraded, "informational": True, "circuits": circuits}
        body = {"ready": not failing, "degraded": degraded, "checks": checks}
        response = Response(body, status=503 if failing else 200)
        if failing:
            # A 503 to a probe is news, not a fault of ours: a warning, not Django's error line.
            logger.warning("not ready: %s", ", ".join(failing))
            response._has_been_logged = True
        return response


class MetricsView(APIView):
    """Prometheus metrics; needs the view-all permission (they describe every client's jobs)."""

    permission_classes = [ActionPermission]
    action_permissions = {"GET": "jobtracking.view_all_extractionjobs"}
    throttle_classes = []

    @extend_schema(exclude=True)
    def get(self, request):
        return HttpResponse(render_metrics(DatabaseCollector()), content_type=CONTENT_TYPE_LATEST)
