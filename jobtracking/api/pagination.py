"""Keyset cursor pagination over a unique ordering.

DRF's `CursorPagination` remembers only the first ordering field's value plus an offset among the
rows that share it. Jobs of one bulk request share `created_at`, and PostgreSQL returns ties in no
fixed order between two queries, so paging skipped some jobs and repeated others. Here the
ordering always ends with the primary key, and the cursor carries the whole key of the row it
continues from: a page is "the rows strictly beyond this key", which no tie can blur.

The cursor is opaque to clients (URL-safe base64 of a small JSON document). It names the ordering
it was made for; a cursor from another ordering, from the earlier format, or not a cursor at all
is refused with a 400 `invalid_cursor` problem.
"""

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Model, Q, QuerySet
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination, CursorPagination
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from jobtracking.errors import ApplicationError

MAX_PAGE_SIZE = 500
CURSOR_VERSION = 2


class InvalidCursorError(ApplicationError):
    code = "invalid_cursor"
    http_status = 400


@dataclass(frozen=True)
class Cursor:
    values: tuple[Any, ...]  # the key of the row the page continues from
    backwards: bool  # True: the rows before that key (a `previous` link)


def _name(key: str) -> str:
    return key.lstrip("-")


def _flip(key: str) -> str:
    return key[1:] if key.startswith("-") else f"-{key}"


def beyond(ordering: tuple[str, ...], values: tuple[Any, ...]) -> Q:
    """Rows strictly after `values` in `ordering` (a lexicographic comparison). The leading
    field's bound comes first on its own so that the index on that field serves it."""
    condition = None
    for key, value in reversed(list(zip(ordering, values, strict=True))):
        strict = Q(**{f"{_name(key)}__{'lt' if key.startswith('-') else 'gt'}": value})
        condition = strict if condition is None else strict | (Q(**{_name(key): value}) & condition)
    lead = ordering[0]
    bound = f"{_name(lead)}__{'lte' if lead.startswith('-') else 'gte'}"
    return Q(**{bound: values[0]}) & condition


class KeysetCursorPagination(BasePagination):
    """`?cursor=` pages in the view's ordering (its `OrderingFilter`, else `ordering`), with the
    primary key appended as the tiebreak."""

    ordering: tuple[str, ...] = ("-created_at",)
    page_size = 50
    # A person reading the browsable API: 50 jobs make a page tens of thousands of pixels tall.
    browsable_page_size = 20
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE
    cursor_query_param = "cursor"

    def paginate_queryset(self, queryset: QuerySet, request, view=None) -> list[Model]:
        self.base_url = request.build_absolute_uri()
        self.model = queryset.model
        self.keys = self.get_ordering(request, queryset, view)
        size = self.get_page_size(request)
        cursor = self.decode_cursor(request)
        backwards = cursor is not None and cursor.backwards
        ordering = tuple(_flip(key) for key in self.keys) if backwards else self.keys
        queryset = queryset.order_by(*ordering)
        if cursor is not None:
            queryset = queryset.filter(beyond(ordering, cursor.values))
        rows = list(queryset[: size + 1])
        more = len(rows) > size
        rows = rows[:size]
        if backwards:
            rows.reverse()
            self.has_next, self.has_previous = True, more
        else:
            self.has_next, self.has_previous = more, cursor is not None
        self.page = rows
        return rows

    def get_ordering(self, request, queryset: QuerySet, view) -> tuple[str, ...]:
        # DRF's own resolution (the view's OrderingFilter, validated against ordering_fields).
        keys = tuple(CursorPagination.get_ordering(self, request, queryset, view))
        pk = queryset.model._meta.pk.name
        if _name(keys[-1]) not in (pk, "pk"):
            keys += (f"-{pk}" if keys[0].startswith("-") else pk,)
        return keys

    def get_page_size(self, request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            renderer = getattr(request, "accepted_renderer", None)
            browsable = getattr(renderer, "format", None) == "api"
            return self.browsable_page_size if browsable else self.page_size
        if raw.isascii() and raw.isdigit() and 1 <= int(raw) <= self.max_page_size:
            return int(raw)
        raise ValidationError(
            {self.page_size_query_param: [f"Must be an integer from 1 to {self.max_page_size}."]}
        )

    def decode_cursor(self, request) -> Cursor | None:
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        try:
            document = json.loads(base64.urlsafe_b64decode(encoded.encode("ascii") + b"=="))
            if document["v"] != CURSOR_VERSION or tuple(document["o"]) != self.keys:
                raise ValueError
            raw = document["k"]
            if not isinstance(raw, list) or len(raw) != len(self.keys):
                raise ValueError
            values = tuple(
                self.model._meta.get_field(_name(key)).to_python(value)
                for key, value in zip(self.keys, raw, strict=True)
            )
            backwards = bool(document["b"])
        except (ValueError, TypeError, KeyError, binascii.Error, DjangoValidationError):
            raise self.invalid() from None
        if any(value is None for value in values):
            raise self.invalid()
        return Cursor(values=values, backwards=backwards)

    def invalid(self) -> InvalidCursorError:
        return InvalidCursorError(
            "The cursor is not valid for this list and ordering: start again from the first "
            "page and follow the `next` and `previous` links as given."
        )

    def encode_cursor(self, row: Model, *, backwards: bool) -> str:
        key = [self.model._meta.get_field(_name(k)).value_to_string(row) for k in self.keys]
        document = {"v": CURSOR_VERSION, "o": list(self.keys), "k": key, "b": backwards}
        token = base64.urlsafe_b64encode(json.dumps(document, separators=(",", ":")).encode())
        return replace_query_param(
            self.base_url, self.cursor_query_param, token.decode().rstrip("=")
        )

    def get_next_link(self) -> str | None:
        if not (self.has_next and self.page):
            return None
        return self.encode_cursor(self.page[-1], backwards=False)

    def get_previous_link(self) -> str | None:
        if not self.has_previous:
            return None
        if not self.page:
            return remove_query_param(self.base_url, self.cursor_query_param)
        return self.encode_cursor(self.page[0], backwards=True)

    def get_paginated_response(self, data) -> Response:
        return Response(
            {"next": self.get_next_link(), "previous": self.get_previous_link(), "results": data}
        )

    def get_paginated_response_schema(self, schema: dict) -> dict:
        return CursorPagination.get_paginated_response_schema(self, schema)

    def get_schema_operation_parameters(self, view) -> list[dict]:
        return [
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "The opaque cursor of a `next` or `previous` link.",
                "schema": {"type": "string"},
            },
            {
                "name": self.page_size_query_param,
                "required": False,
                "in": "query",
                "description": f"Results per page (default {self.page_size}, "
                f"{self.browsable_page_size} in the browsable API; at most "
                f"{self.max_page_size}).",
                "schema": {"type": "integer", "minimum": 1, "maximum": self.max_page_size},
            },
        ]
