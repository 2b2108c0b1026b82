"""A paginator that never counts a large table: PostgreSQL's planner estimate stands in for
COUNT(*) once a result is known to be large."""

import json
from functools import cached_property

from django.core.paginator import Paginator
from django.db import connections

EXACT_BELOW = 10_000


class EstimatedCountPaginator(Paginator):
    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        connection = connections[queryset.db]
        # Small results are counted exactly, without ever scanning more than EXACT_BELOW rows.
        exact = queryset.order_by().values("pk")[:EXACT_BELOW].count()
        if exact < EXACT_BELOW or connection.vendor != "postgresql":
            return exact
        sql, params = queryset.order_by().query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
            plan = cursor.fetchone()[0]
        plan = json.loads(plan) if isinstance(plan, str) else plan
        return max(exact, int(plan[0]["Plan"]["Plan Rows"]))
