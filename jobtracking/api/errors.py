"""One error shape everywhere: RFC 9457 problem details (application/problem+json), with a
stable machine `code` and, for validation, field-level `errors`."""

import logging
import sys
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpResponse, JsonResponse
from rest_framework import exceptions, status
from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.response import Response

from jobtracking.api.parsers import unsupported_media_type_detail
from jobtracking.api.problems import problem_type
from jobtracking.api.renderers import FastJSONRenderer
from jobtracking.errors import ApplicationError, JobValidationError
from jobtracking.infra.dbfaults import database_unreachable
from jobtracking.infra.storable import safe_text

logger = logging.getLogger(__name__)

TITLES = {
    400: "Bad request",
    401: "Authentication required",
    403: "Permission denied",
    404: "Not found",
    405: "Method not allowed",
    406: "Not acceptable",
    409: "Conflict",
    413: "Payload too large",
    415: "Unsupported media type",
    422: "Unprocessable request",
    429: "Too many requests",
    500: "Internal server error",
    503: "Service unavailable",
}


def problem_body(status_code: int, code: str, detail: str, **extra: Any) -> dict[str, Any]:
    # The standard members come last so that no extra member can replace them.
    return echo_safe(
        {
            **extra,
            "type": problem_type(code),
            "title": TITLES.get(status_code, "Error"),
            "status": status_code,
            "code": code,
            "detail": detail,
        }
    )


def echo_safe(value: Any) -> Any:
    """`value` with its text (keys too) made writable (`storable.safe_text`). A problem echoes
    what the client sent (an unknown field's or parameter's name, a refused choice, a JSON key),
    which may hold a lone surrogate that no UTF-8 writer can write: the refusal would become a
    500. Every problem body is made here, so none escapes this."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {echo_safe(key): echo_safe(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [echo_safe(inner) for inner in value]
    return value


def problem(status_code: int, code: str, detail: str, headers=None, **extra: Any) -> Response:
    return Response(
        problem_body(status_code, code, detail, **extra),
        status=status_code,
        headers=headers,
        content_type="application/problem+json",
    )


def field_errors(detail: Any) -> dict[str, list]:
    """Always {field: [messages]}; a value inside a field by its path (`batch.metadata`,
    `metadata.a.b[2]`)."""
    errors: dict[str, list] = {}

    def add(path: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                add(f"{path}.{key}" if path else str(key), inner)
        elif isinstance(value, list):
            for inner in value:
                add(path, inner)
        else:
            errors.setdefault(path or "non_field_errors", []).append(value)

    add("", detail)
    return errors


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    request = context.get("request")
    if type(exc) is exceptions.UnsupportedMediaType and request is not None:
        # DRF's own says only which type it refused; say which to send.
        media_type = request.content_type.split(";")[0].strip()
        readable = [parser.media_type for parser in request.parsers]
        exc = exceptions.UnsupportedMediaType(
            media_type, detail=unsupported_media_type_detail(media_type, readable)
        )
    response = _problem_for(exc)
    if response is None or request is None:
        return response
    if isinstance(getattr(request, "accepted_renderer", None), BrowsableAPIRenderer):
        # A person at the browsable API: the page shows the problem, its form the field errors.
        response.content_type = None
    else:
        # Errors are JSON whatever the endpoint renders otherwise (YAML schema, CSV...).
        request.accepted_renderer = FastJSONRenderer()
        request.accepted_media_type = "application/problem+json"
    return response


def _problem_for(exc: Exception) -> Response | None:
    if database_unreachable(exc):
        seconds, detail = _database_unavailable(exc)
        headers = {"Retry-After": str(seconds)}
        response = problem(503, "database_unavailable", detail, headers=headers)
        response._has_been_logged = True  # our warning line stands for Django's error line
        return response
    if isinstance(exc, JobValidationError):
        return problem(400, exc.code, exc.message, errors=field_errors(exc.fields))
    if isinstance(exc, ApplicationError):
        detail = f"{exc.message} {exc.api_hint}" if exc.api_hint else exc.message
        return problem(exc.http_status, exc.code, detail, **exc.extra)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.ValidationError):
        return problem(
            400, "validation_error", "The request is invalid.", errors=field_errors(exc.detail)
        )
    if isinstance(exc, exceptions.APIException):
        headers = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else exc.default_code
        return problem(exc.status_code, code, str(exc.detail), headers=headers)
    return None


def problem_response(status_code: int, code: str, detail: str, **extra: Any) -> JsonResponse:
    """A problem outside DRF (Django's error handlers, middleware)."""
    return JsonResponse(
        problem_body(status_code, code, detail, **extra),
        status=status_code,
        content_type="application/problem+json",
    )


def json_error_view(status_code: int, code: str, detail: str):
    def view(request, exception=None):
        return problem_response(status_code, code, detail)

    return view


def _database_unavailable(exc: BaseException) -> tuple[int, str]:
    # An outage is news for operators, not a bug: one warning line a request, no traceback.
    logger.warning("Database unavailable: %s", exc)
    seconds = settings.DATABASE_UNAVAILABLE_RETRY_AFTER_SECONDS
    return seconds, f"The database cannot be reached; retry after {seconds} seconds."


def database_unavailable_response(request, exc: BaseException) -> HttpResponse:
    """The 503 for an unreachable database met outside a DRF view: in middleware (sessions,
    authentication, django-axes) or a Django view such as the admin's. Problem details under
    `/api/`, a line of text elsewhere."""
    seconds, detail = _database_unavailable(exc)
    if request.path.startswith("/api/"):
        response = problem_response(503, "database_unavailable", detail)
    else:
        response = HttpResponse(
            f"Service unavailable. {detail}\n", status=503, content_type="text/plain; charset=utf-8"
        )
    response["Retry-After"] = str(seconds)
    response._has_been_logged = True
    return response


def server_error(request, *args, **kwargs):
    # Django calls this handler500 inside its `except` block: the exception is still current.
    if database_unreachable(exc := sys.exception()):
        return database_unavailable_response(request, exc)
    logger.error("Unhandled error on %s %s", request.method, request.path)
    return json_error_view(
        status.HTTP_500_INTERNAL_SERVER_ERROR, "server_error", "Something went wrong on our side."
    )(request)


# What Django's own error pages mean, as problem codes.
STATUS_CODES = {
    400: "bad_request",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}


class ApiProblemMiddleware:
    """Every `/api/` error answer is problem+json, including the ones Django writes itself: an
    unknown route or id with DEBUG on, a body over `DATA_UPLOAD_MAX_MEMORY_SIZE` (413), a CSRF
    refusal."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        content_type = response.get("Content-Type", "")
        if isinstance(getattr(response, "accepted_renderer", None), BrowsableAPIRenderer):
            return response  # the browsable API's page, showing the problem to a person
        if (
            request.path.startswith("/api/")
            and response.status_code >= 400
            and not content_type.startswith(("application/problem+json", "application/json"))
        ):
            status_code = response.status_code
            code = STATUS_CODES.get(
                status_code, "server_error" if status_code >= 500 else "bad_request"
            )
            return problem_response(status_code, code, TITLES.get(status_code, "Error") + ".")
        return response

    def process_exception(self, request, exception):
        if request.path.startswith("/api/") and isinstance(exception, RequestDataTooBig):
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            return problem_response(
                413,
                "payload_too_large",
                f"Bodies are limited to {limit} bytes (uploads: use multipart).",
                limit=limit,
            )
        return None
