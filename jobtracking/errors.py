"""Application errors: each carries a stable machine `code` and the HTTP status it maps to."""

from typing import Any


class ApplicationError(Exception):
    code = "application_error"
    http_status = 400
    # What an API client should do about it, added to the problem's detail (the admin and the
    # commands have their own controls for it).
    api_hint = ""

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra


class JobNotFoundError(ApplicationError):
    code = "job_not_found"
    http_status = 404


class WebhookEndpointNotFoundError(ApplicationError):
    code = "webhook_endpoint_not_found"
    http_status = 404


class WebhookDeliveryNotFoundError(ApplicationError):
    code = "webhook_delivery_not_found"
    http_status = 404


class ResultNotReadyError(ApplicationError):
    """The job exists but has no result (yet): `job_status` says where it is."""

    code = "result_not_ready"
    http_status = 409


class JobEndedWithoutResultError(ApplicationError):
    """The job ended without a result (failed, timed out or cancelled): none will come unless it
    is requeued. `job_status` says how it ended; its `error` says why."""

    code = "job_ended_without_result"
    http_status = 409


class InvalidTransitionError(ApplicationError):
    """The transition table does not allow this move from the job's current status."""

    code = "invalid_transition"
    http_status = 409


class ForceRequiredError(InvalidTransitionError):
    code = "force_required"
    api_hint = 'Send "force": true to requeue it anyway.'


class JobMovedOnError(InvalidTransitionError):
    """The job left the status the caller expected: somebody else acted first."""

    code = "job_moved_on"


class ActiveJobExistsError(ApplicationError):
    code = "active_job_exists"
    http_status = 409


class ExtractorDisabledError(ApplicationError):
    code = "extractor_disabled"
    http_status = 400


class JobValidationError(ApplicationError):
    """Bad input to a service; `fields` maps field names to messages."""

    code = "validation_error"
    http_status = 400

    def __init__(self, fields: dict[str, str]) -> None:
        super().__init__("Invalid input: " + "; ".join(f"{k}: {v}" for k, v in fields.items()))
        self.fields = fields


class IdempotencyKeyReusedError(ApplicationError):
    """The Idempotency-Key was used before for a different request."""

    code = "idempotency_key_reused"
    http_status = 422


class BatchNotFoundError(ApplicationError):
    code = "batch_not_found"
    http_status = 404


class BatchFinishedError(ApplicationError):
    """The batch has completed: nothing is left to cancel (`batch_states.ALLOWED`)."""

    code = "batch_finished"
    http_status = 409


class BatchClosedError(ApplicationError):
    """The batch was closed (or cancelled): it takes no more jobs."""

    code = "batch_closed"
    http_status = 409


class BatchReferenceExistsError(ApplicationError):
    """The client already has a batch with this `client_reference`: `batch_id` names it."""

    code = "batch_reference_exists"
    http_status = 409


class BudgetExhaustedError(ApplicationError):
    """The client's usage budget, set to refuse new jobs once used up, is used up."""

    code = "budget_exhausted"
    http_status = 403
    api_hint = "Ask the service's staff to raise the budget, or wait for the next month."
