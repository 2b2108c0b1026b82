from datetime import timedelta

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from extraction.models import Adapter, Extractor
from jobtracking import states
from jobtracking.events import job_event_payload
from jobtracking.models import (
    ActorType,
    Batch,
    DeliveryState,
    ExtractionJob,
    ExtractionResult,
    JobEvent,
    JobStatusChange,
    WebhookDelivery,
    WebhookSubscription,
)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ["username"]

    username = factory.Sequence(lambda n: f"client{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.django.Password("secret-password")


class ExtractorFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Extractor

    slug = factory.Sequence(lambda n: f"extractor-{n}")
    name = factory.LazyAttribute(lambda e: e.slug.title())
    adapter = Adapter.HTTP_ASYNC
    base_url = "http://127.0.0.1:9"
    api_key_env = "EXTRACTOR_TEST_KEY"

    class Params:
        azure = factory.Trait(
            adapter=Adapter.AZURE_DI,
            model_id="prebuilt-layout",
            api_key_env="EXTRACTOR_TEST_AZURE_KEY",
        )
        disabled = factory.Trait(enabled=False)


class BatchFactory(factory.django.DjangoModelFactory):
    """A batch written directly (arrange only: acting goes through `services.batches`)."""

    class Meta:
        model = Batch

    requested_by = factory.SubFactory(UserFactory)

    class Params:
        closed = factory.Trait(closed_at=factory.LazyFunction(timezone.now))


class ExtractionJobFactory(factory.django.DjangoModelFactory):
    """A job in any status, written directly (arrange only: acting goes through services)."""

    class Meta:
        model = ExtractionJob

    extractor = factory.SubFactory(ExtractorFactory)
    status_id = states.PENDING
    file_id = factory.Sequence(lambda n: f"file-{n}")
    file_name = factory.LazyAttribute(lambda j: f"{j.file_id}.pdf")
    content_type = "application/pdf"
    source_url = factory.LazyAttribute(lambda j: f"https://files.example.org/{j.file_id}.pdf")
    requested_by = factory.SubFactory(UserFactory)
    due_at = factory.LazyFunction(timezone.now)
    deadline_at = factory.LazyFunction(lambda: timezone.now() + timedelta(hours=1))

    class Params:
        held = factory.Trait(
            status_id=states.HELD, due_at=None, held_since=factory.LazyFunction(timezone.now)
        )
        submitting = factory.Trait(
            status_id=states.SUBMITTING,
            submit_attempts=1,
            lease_expires_at=factory.LazyFunction(lambda: timezone.now() + timedelta(minutes=1)),
        )
        submitted = factory.Trait(
            status_id=states.SUBMITTED,
            external_job_id=factory.Sequence(lambda n: f"ext-{n}"),
            submitted_at=factory.LazyFunction(timezone.now),
        )
        processing = factory.Trait(
            status_id=states.PROCESSING,
            external_job_id=factory.Sequence(lambda n: f"ext-{n}"),
            submitted_at=factory.LazyFunction(timezone.now),
            started_at=factory.LazyFunction(timezone.now),
            progress=40,
        )
        succeeded = factory.Trait(
            status_id=states.SUCCEEDED,
            external_job_id=factory.Sequence(lambda n: f"ext-{n}"),
            progress=100,
            due_at=None,
            completed_at=factory.LazyFunction(timezone.now),
        )
        failed = factory.Trait(
            status_id=states.FAILED,
            error_code="extraction_failed",
            error_message="The document is corrupt.",
            due_at=None,
            completed_at=factory.LazyFunction(timezone.now),
        )
        timed_out = factory.Trait(
            status_id=states.TIMED_OUT,
            error_code="deadline_exceeded",
            due_at=None,
            completed_at=factory.LazyFunction(timezone.now),
        )
        cancelled = factory.Trait(
            status_id=states.CANCELLED,
            due_at=None,
            completed_at=factory.LazyFunction(timezone.now),
        )


class JobStatusChangeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = JobStatusChange

    job = factory.SubFactory(ExtractionJobFactory)
    from_status_id = None
    to_status_id = states.PENDING
    attempt = 1
    actor_type = ActorType.SYSTEM


class ExtractionResultFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ExtractionResult

    job = factory.SubFactory(ExtractionJobFactory, succeeded=True)
    attempt = 1
    payload = factory.LazyFunction(lambda: {"pages": [{"number": 1, "text": "Total: 10"}]})
    content_sha256 = "0" * 64
    size_bytes = 42
    page_count = 1


class JobEventFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = JobEvent

    job = factory.SubFactory(ExtractionJobFactory)
    type = states.EVENT_CREATED
    payload = factory.LazyAttribute(lambda e: job_event_payload(e.job))


class WebhookSubscriptionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = WebhookSubscription

    url = factory.Sequence(lambda n: f"https://hooks.example.org/{n}")
    event_types = factory.LazyFunction(list)
    # Every type unless some are listed: "all" is a choice of its own (an empty list is none).
    all_event_types = factory.LazyAttribute(lambda s: not s.event_types)


class WebhookDeliveryFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = WebhookDelivery

    event = factory.SubFactory(JobEventFactory)
    subscription = factory.SubFactory(WebhookSubscriptionFactory)
    state = DeliveryState.PENDING
    next_attempt_at = factory.LazyFunction(timezone.now)


def api_job(extractor=None, file_id: str = "f", *, user=None, **fields) -> ExtractionJob:
    """A job made the way a client's request makes it: through `job_create` (audit row, event,
    deliveries), by URL unless an upload is given."""
    from jobtracking.services import Actor, NewJob, job_create

    if "upload" not in fields:
        fields.setdefault("source_url", "https://files.example.org/f.pdf")
    new = NewJob(extractor=extractor or ExtractorFactory(), file_id=file_id, **fields)
    return job_create(new, actor=Actor("api", user))
