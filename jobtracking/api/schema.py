"""OpenAPI generation: every operation documents the problem-details errors it can return."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

ERROR_STATUSES = {
    "400": "Invalid input (field-level `errors`)",
    "401": "Not authenticated",
    "403": "Missing permission",
    "404": "Not found (or not yours)",
    "405": "Method not allowed",
    "409": "Conflict with the job's state or another active job",
    "413": "Upload too large",
    "415": "Unsupported media type",
    "422": "Idempotency-Key reused with a different request",
    "429": "Throttled (see Retry-After)",
}


class ProblemSerializer(serializers.Serializer):
    """RFC 9457 problem details; some problems add members (e.g. `job_id`, `errors`)."""

    type = serializers.CharField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    code = serializers.CharField()
    detail = serializers.CharField()
    errors = serializers.DictField(required=False)


class ProblemAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction: str = "response") -> dict:
        responses = super()._get_response_bodies(direction)
        problem = self.resolve_serializer(ProblemSerializer, "response").ref
        for status, description in ERROR_STATUSES.items():
            responses.setdefault(
                status,
                {
                    "description": description,
                    "content": {"application/problem+json": {"schema": problem}},
                },
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
