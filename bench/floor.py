"""The API benchmark's floors, served by the same gunicorn as the API (`bench.floor_settings`):
authenticated DRF views with the API's authentication, permission and throttle classes that
parse a JSON body and INSERT one row, or for a bulk body one row per item in one statement.
This module is that server's URLconf."""

import json

from django.db import connection
from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from config.urls import handler404, handler500  # noqa: F401 (the root URLconf's handlers)
from config.urls import urlpatterns as service_urlpatterns

TABLE = "bench_floor"


class FloorView(APIView):
    def post(self, request):
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {TABLE} (body) VALUES (%s) RETURNING id", [json.dumps(request.data)]
            )
            (row_id,) = cursor.fetchone()
        return Response({"id": row_id}, status=201)


class BulkFloorView(APIView):
    def post(self, request):
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {TABLE} (body) SELECT value FROM jsonb_array_elements(%s::jsonb) "
                "RETURNING id",
                [json.dumps(request.data["jobs"])],
            )
            ids = [row_id for (row_id,) in cursor.fetchall()]
        return Response({"ids": ids})


def create_table() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id bigserial PRIMARY KEY, body jsonb)")


urlpatterns = [
    path("bench/floor/", FloorView.as_view()),
    path("bench/floor/bulk/", BulkFloorView.as_view()),
    *service_urlpatterns,
]
