"""OpenAPI generation: every operation documents the problem-details errors it can return."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

from jobtracking.api.errors import problem_body
from jobtracking.api.problems import PROBLEMS

ERROR_STATUSES = {
    "400": "Invalid input (field-level `errors`)",
    "401": "Not authenticated",
    "403": "Missing permission",
    "404": "Not found (or not yours)",
    "405": "Method not allowed",
    "409": "Conflict with the job's or batch's state, or another active job",
    "413": "Upload too large",
    "415": "Unsupported media type",
    "422": "Idempotency-Key reused with a different request",
    "429": "Throttled (see Retry-After)",
    "503": "The database cannot be reached for a moment (see Retry-After)",
}


class ProblemSerializer(serializers.Serializer):
    """RFC 9457 problem details; some problems add members (e.g. `job_id`, `errors`)."""

    type = serializers.CharField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    code = serializers.CharField()
    detail = serializers.CharField()
    errors = serializers.DictField(required=False)


# What some problems add to the standard members, in the examples.
EXAMPLE_EXTRAS = {
    "validation_error": {
        "errors": {
            "extractor": ["No extractor 'nope'. Available: azure-layout, sandbox."],
            "colour": ["Unknown field. This request takes: extractor, file_id, source_url, …"],
        }
    },
    "active_job_exists": {"job_id": "01939f4c-7a2e-7d4b-9a61-3f2b8c9d0e1f"},
    "invalid_transition": {"current_status": "succeeded"},
    "payload_too_large": {"limit": 52428800},
    "batch_reference_exists": {"batch_id": "01939f4c-6f00-7a1b-8c2d-3e4f5a6b7c8d"},
}


def problem_examples(status: int) -> dict:
    """One example per problem code answered with `status`, from the catalogue."""
    return {
        code: {
            "summary": code,
            "value": problem_body(status, code, text, **EXAMPLE_EXTRAS.get(code, {})),
        }
        for code, (code_status, text) in PROBLEMS.items()
        if code_status == status
    }


class ProblemAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction: str = "response") -> dict:
        responses = super()._get_response_bodies(direction)
        problem = self.resolve_serializer(ProblemSerializer, "response").ref
        for status, description in ERROR_STATUSES.items():
            content = {"schema": problem}
            if examples := problem_examples(int(status)):
                content["examples"] = examples
            responses.setdefault(
                status,
                {"description": description, "content": {"application/problem+json": content}},
            )
        return responses


class HashedTokenScheme(OpenApiAuthenticationExtension):
    """Lets the interactive docs send `Authorization: Token <key>`."""

    target_class = "jobtracking.api.auth.HashedTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema) -> dict:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": 'The key from `manage.py create_api_token`, prefixed: "Token <key>".',
        }
