"""Every problem `code` the API answers with, documented: each problem's `type` is
`/api/problems/<code>`, a page this service serves (HTML for a browser, JSON otherwise). The
descriptions are Markdown (`code` spans), rendered on the HTML pages."""

from http import HTTPStatus

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse

from jobtracking.api.markup import render

# code: (HTTP status, what it means and what to do)
PROBLEMS = {
    "validation_error": (
        400,
        "The request body or a parameter is invalid. `errors` maps each field to its messages "
        "(a value inside one by its path: `metadata.a.b[2]`); fix those fields and send the "
        "request again. Unknown fields are refused by name. In a bulk request, an item's own "
        "problem is in its result, under its `index`.",
    ),
    "parse_error": (400, "The body is not valid JSON (or form data). Check the Content-Type."),
    "bad_request": (400, "The request could not be read (for example a malformed header)."),
    "invalid_cursor": (
        400,
        "The page cursor is not one this list made (altered, from another ordering, or from an "
        "older format). Start again from the first page.",
    ),
    "unsafe_url": (
        400,
        "The URL is refused: it must be http(s), carry no credentials and reach a public address.",
    ),
    "extractor_disabled": (400, "The extractor is disabled: pick another one or ask staff."),
    "not_authenticated": (
        401,
        "No credentials: send `Authorization: Token <key>` (keys come from an administrator).",
    ),
    "authentication_failed": (401, "The token is wrong, revoked or its user is inactive."),
    "permission_denied": (403, "The client lacks the permission this action needs."),
    "not_found": (404, "No such resource, or not one this client may see."),
    "job_not_found": (404, "No such job, or not one this client may see."),
    "webhook_endpoint_not_found": (
        404,
        "No such webhook endpoint among this client's own: each client sees and changes only "
        "the endpoints it created. List them with GET /api/v1/webhook_endpoints/.",
    ),
    "webhook_delivery_not_found": (
        404,
        "The endpoint has no such delivery (or not of a job this client may see). List them "
        "with GET /api/v1/webhook_endpoints/{id}/deliveries/.",
    ),
    "batch_not_found": (404, "No such batch, or not one this client may see."),
    "method_not_allowed": (405, "This endpoint does not accept that HTTP method; see `Allow`."),
    "not_acceptable": (406, "No representation matches the Accept header; ask for JSON."),
    "result_not_ready": (
        409,
        "The job has no result yet: it is still on its way (`job_status`: pending, submitting, "
        "submitted or processing). Wait for `job.succeeded` or poll the job. A job that ended "
        "without one answers `job_ended_without_result` instead.",
    ),
    "job_ended_without_result": (
        409,
        "The job ended without a result (`job_status`: failed, timed out or cancelled), so none "
        "will come: stop waiting for it. The job's `error` says why; requeue it "
        "(`POST /api/v1/jobs/{id}/requeue/`) if another attempt may succeed.",
    ),
    "invalid_transition": (
        409,
        "The job's status does not allow this action (for example cancelling a finished job). "
        "`current_status` says where it is.",
    ),
    "force_required": (
        409,
        "Requeueing a succeeded job discards nothing but costs a new extraction: send "
        '`"force": true` to confirm.',
    ),
    "job_moved_on": (409, "The job changed while the request ran; read it again and retry."),
    "active_job_exists": (
        409,
        "An active job already exists for this extractor and file_id; `job_id` names it. Wait for "
        "it or cancel it first.",
    ),
    "budget_exhausted": (
        403,
        "The client's monthly usage budget, set to refuse new jobs once used up, is used up. "
        "`budget_pages` and `used_pages` say how far; `resets_at` is when the next month "
        "begins. Ask the service's staff to raise the budget, or wait for it.",
    ),
    "batch_closed": (
        409,
        "The batch is closed (or cancelled): it takes no more jobs. Create a new batch for them.",
    ),
    "batch_finished": (
        409,
        "The batch has completed (`batch_status`: completed or completed with failures): every "
        "job in it has ended, so there is nothing to cancel. Requeue its failed jobs instead "
        "(`POST /api/v1/batches/{id}/requeue/`).",
    ),
    "batch_reference_exists": (
        409,
        "This client already has a batch with this `client_reference`; `batch_id` names it. "
        "Add jobs to that one, or use another reference.",
    ),
    "payload_too_large": (413, "The body or upload is larger than allowed; `limit` says how much."),
    "unsupported_media_type": (
        415,
        "The body's or the upload's content type is not accepted; the detail lists the allowed "
        "ones. JSON sent form-encoded (curl's `-d` without a header) is refused so too: send "
        "`Content-Type: application/json`.",
    ),
    "content_mismatch": (
        415,
        "The upload's first bytes do not match its declared type (a renamed file?).",
    ),
    "idempotency_key_reused": (
        422,
        "This Idempotency-Key was used for a different request; use a new key per new request.",
    ),
    "throttled": (429, "Too many requests; wait for `Retry-After` seconds."),
    "server_error": (500, "Something went wrong on our side; it has been logged. Retry later."),
    "database_unavailable": (
        503,
        "The database cannot be reached for a moment (a restart, a failover). Send the request "
        "again after `Retry-After` seconds (a create with the same Idempotency-Key, which "
        "returns the job if the first attempt made it).",
    ),
}

TYPE_PREFIX = "/api/problems/"


def problem_type(code: str) -> str:
    return TYPE_PREFIX + code


def _wants_html(request: HttpRequest) -> bool:
    return "text/html" in request.headers.get("Accept", "")


def problem_page(request: HttpRequest, code: str) -> HttpResponse:
    if code not in PROBLEMS:
        raise Http404
    status, text = PROBLEMS[code]
    if not _wants_html(request):
        return JsonResponse({"code": code, "status": status, "description": text})
    context = {
        "code": code,
        "status": status,
        "phrase": HTTPStatus(status).phrase,
        "description": render(text),
    }
    return TemplateResponse(request, "api/problem.html", context)


def problem_index(request: HttpRequest) -> HttpResponse:
    if not _wants_html(request):
        return JsonResponse(
            {code: {"status": s, "description": t} for code, (s, t) in PROBLEMS.items()}
        )
    problems = [
        {"code": code, "url": problem_type(code), "status": s, "description": render(t)}
        for code, (s, t) in PROBLEMS.items()
    ]
    return TemplateResponse(request, "api/problems.html", {"problems": problems})
