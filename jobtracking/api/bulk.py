"""What the bulk endpoints share (`POST /jobs/bulk/`, `POST /batches/` and
`POST /batches/{id}/jobs/`): items validated by the create serializer's rules, each with its
outcome; and the small helpers every write view uses."""

from rest_framework.exceptions import ValidationError

from extraction.models import Extractor
from jobtracking.api.bulk_validation import BulkItemValidator
from jobtracking.api.errors import field_errors, problem_body
from jobtracking.api.serializers import ExtractionJobSerializer
from jobtracking.errors import JobValidationError
from jobtracking.infra.storable import text_problem
from jobtracking.models import ActorType, Priority
from jobtracking.services import Actor, NewJob

ITEM_NOT_AN_OBJECT = "Must be a JSON object of a job's fields."

# Marks the answer to an idempotent replay (the IETF draft's Idempotency-Key leaves it to us).
REPLAYED_HEADER = "Idempotent-Replayed"


def api_actor(request) -> Actor:
    return Actor(ActorType.API, request.user)


def validated(serializer_class, request) -> dict:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def idempotency_key(request) -> str:
    """The request's `Idempotency-Key`, "" without one; a key that cannot be stored (too long,
    a NUL: `storable`'s rule) is refused."""
    key = request.headers.get("Idempotency-Key", "").strip()
    problem = "At most 255 characters." if len(key) > 255 else text_problem(key)
    if problem:
        raise JobValidationError({"Idempotency-Key": problem})
    return key


INTERACTIVE_PERMISSION = "jobtracking.set_interactive_priority"


def check_priority(request, data: dict) -> dict:
    """Interactive work goes before every other client's: a client needs leave to ask for it
    (creates, bulk items and requeues alike)."""
    if data.get("priority") == Priority.INTERACTIVE and not request.user.has_perm(
        INTERACTIVE_PERMISSION
    ):
        raise ValidationError(
            {
                "priority": [
                    "The interactive priority needs the permission to set it (ask staff for "
                    "it); use normal or bulk."
                ]
            }
        )
    return data


def item_error(index: int, body: dict) -> dict:
    return {"index": index, "status": "error", "job": None, "error": body}


def bulk_results(request, items: list, create, *, always: bool = False) -> dict:
    """A bulk body's items: each validated as a JSON create (`BulkItemValidator`, the create
    serializer's rules), the valid ones created by `create(new_jobs)` (which returns their
    `BulkOutcome`s; called with none only when `always`), and every item's outcome in order."""
    slugs = {
        slug
        for item in items
        if type(item) is dict
        and isinstance(slug := item.get("extractor"), str)
        and text_problem(slug) is None  # (the database cannot compare it; its item is refused)
    }
    checker = BulkItemValidator({e.slug: e for e in Extractor.objects.filter(slug__in=slugs)})
    valid, results = [], {}
    for index, item in enumerate(items):
        try:
            if type(item) is not dict:
                raise ValidationError([ITEM_NOT_AN_OBJECT])
            if "file" in item:
                raise ValidationError({"file": ["Bulk create takes source_url only."]})
            valid.append((index, check_priority(request, checker.validated(item))))
        except ValidationError as error:
            body = problem_body(
                400, "validation_error", "The item is invalid.", errors=field_errors(error.detail)
            )
            results[index] = item_error(index, body)
    news = [NewJob(**fields) for _, fields in valid]
    outcomes = create(news) if news or always else []
    created = [outcome.job for outcome in outcomes if outcome.job is not None]
    rendered = iter(ExtractionJobSerializer(created, many=True, context={"request": request}).data)
    for (index, _), outcome in zip(valid, outcomes, strict=True):
        if outcome.job is not None:
            results[index] = {
                "index": index,
                "status": "created",
                "job": next(rendered),
                "error": None,
            }
        else:
            error = outcome.error
            results[index] = item_error(
                index, problem_body(error.http_status, error.code, error.message, **error.extra)
            )
    ordered = [results[index] for index in sorted(results)]
    created_count = sum(1 for item in ordered if item["status"] == "created")
    return {"created": created_count, "failed": len(ordered) - created_count, "results": ordered}
