"""`GET /api/v1/usage/`: billable pages, billed attempts and estimated cost over a date range,
grouped as asked (`usage_selectors.usage_summary`), for the caller's own jobs or, with the
view-all permission, every client's."""

from dataclasses import asdict
from datetime import UTC, datetime, timedelta

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from jobtracking.api.permissions import ActionPermission
from jobtracking.api.query import StrictQueryParameters
from jobtracking.usage_selectors import parse_groups, usage_client_scope, usage_summary

MAX_DAYS = 366


class UsageQuerySerializer(serializers.Serializer):
    """The query: `from` and `to` (UTC days, both included; this month so far by default) and
    `group_by`, a comma-separated list of client, extractor, model and day or month."""

    def get_fields(self):
        return {
            "from": serializers.DateField(required=False),
            "to": serializers.DateField(required=False),
            "group_by": serializers.CharField(required=False, allow_blank=True, default=""),
        }

    def validate_group_by(self, value: str) -> list[str]:
        try:
            return parse_groups(value)
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from None

    def validate(self, attrs):
        today = datetime.now(UTC).date()
        end = attrs.get("to") or today
        start = attrs.get("from") or end.replace(day=1)
        if start > end:
            raise serializers.ValidationError({"from": "On or before `to`."})
        if end - start >= timedelta(days=MAX_DAYS):
            raise serializers.ValidationError({"to": f"At most {MAX_DAYS} days after `from`."})
        return {"from": start, "to": end, "group_by": attrs["group_by"]}


class UsageLineSerializer(serializers.Serializer):
    group = serializers.DictField(
        child=serializers.CharField(allow_null=True),
        help_text="The line's value of each requested group: client (username; null for jobs "
        "no client requested), extractor (slug), model, day (YYYY-MM-DD) or month (YYYY-MM).",
    )
    pages = serializers.IntegerField(help_text="Billable pages.")
    jobs = serializers.IntegerField(
        help_text="Billed attempts: a job requeued counts once per attempt that reached the "
        "extractor."
    )
    pages_saved = serializers.IntegerField(
        help_text="Pages not billed because a job took an identical document's reused result: "
        "what its source was billed (docs/architecture.md, Usage)."
    )
    cost = serializers.DecimalField(
        max_digits=20,
        decimal_places=4,
        allow_null=True,
        help_text="Estimated cost: each day's pages at that day's price; null without a price.",
    )
    currency = serializers.CharField(allow_null=True, help_text="ISO 4217; null without a price.")


class UsageSerializer(serializers.Serializer):
    def get_fields(self):
        return {
            "from": serializers.DateField(),
            "to": serializers.DateField(),
            "group_by": serializers.ListField(child=serializers.CharField()),
            "results": UsageLineSerializer(many=True),
        }


class UsageView(StrictQueryParameters, APIView):
    """Usage (billable pages, billed attempts, estimated cost) of the caller's jobs, or of
    every client's with the view-all permission, from `from` to `to`, grouped by `group_by`."""

    query_parameters = {"from", "to", "group_by"}
    permission_classes = [ActionPermission]
    action_permissions = {"GET": "jobtracking.view_extractionjob"}

    @extend_schema(
        summary="Usage and estimated cost",
        description="Billable pages, billed attempts (`jobs`) and estimated cost with its "
        "currency, from `from` to `to` (UTC days, both included; at most 366 days; by default "
        "this month so far), one line per group and currency. A client sees its own usage; the "
        "view-all permission sees every client's.",
        tags=["usage"],
        parameters=[
            OpenApiParameter(
                "from", OpenApiTypes.DATE, description="YYYY-MM-DD; default the 1st of `to`'s month"
            ),
            OpenApiParameter(
                "to", OpenApiTypes.DATE, description="YYYY-MM-DD; default today (UTC)"
            ),
            OpenApiParameter(
                "group_by",
                str,
                description="Comma-separated: client, extractor, model, day or month.",
            ),
        ],
        responses={200: UsageSerializer},
    )
    def get(self, request):
        query = UsageQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        asked = query.validated_data
        lines = usage_summary(
            client=usage_client_scope(request.user),
            start=asked["from"],
            end=asked["to"],
            group_by=asked["group_by"],
        )
        body = {
            "from": asked["from"],
            "to": asked["to"],
            "group_by": asked["group_by"],
            "results": [asdict(line) for line in lines],
        }
        return Response(UsageSerializer(body).data)
