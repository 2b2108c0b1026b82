"""The job protocol's result (DESIGN §6; the sandbox's): `key_values[]` of `{key, value, page,
confidence?}`, `tables[]` of `{page, caption?, rows}` (rows of cell texts) and `pages[]` of
`{number?, text}`."""

from typing import Any

from extraction import results
from extraction.results import (
    MAX_COLUMNS,
    MAX_ROWS,
    Cell,
    Document,
    KeyValue,
    Page,
    Table,
    document,
    listed,
    text,
    whole,
)


def read(payload: Any) -> Document:
    result = payload if isinstance(payload, dict) else {}
    return document(
        pages(result),
        listed(result.get("key_values")),
        listed(result.get("tables")),
        key_value,
        table,
    )


def key_value(pair: Any) -> KeyValue | None:
    return results.key_value(pair, lambda found: whole(found.get("page"), 1))


def table(found: Any) -> Table | None:
    if not isinstance(found, dict) or not isinstance(found.get("rows"), list):
        return None
    lists = [row for row in found["rows"] if isinstance(row, list)]
    width = max((len(row) for row in lists), default=0)
    truncated = len(lists) > MAX_ROWS or width > MAX_COLUMNS
    width = min(width, MAX_COLUMNS)
    rows = []
    for row in lists[:MAX_ROWS]:
        texts = [text(value) for value in row[:width]]
        rows.append([Cell(value) for value in texts + [""] * (width - len(texts))])
    return Table(
        page=whole(found.get("page"), 1),
        caption=text(found.get("caption")),
        rows=rows,
        truncated=truncated,
    )


def pages(result: dict) -> list[Page]:
    return [
        Page(page.get("number", number), page["text"])
        for number, page in enumerate(listed(result.get("pages")), start=1)
        if isinstance(page, dict) and isinstance(page.get("text"), str)
    ]


def billable_pages(payload: Any, content_type: str) -> int:
    """The pages the extractor processed: the result's `page_count`, else its `pages` counted."""
    result = payload if isinstance(payload, dict) else {}
    counted = whole(result.get("page_count"))
    return counted if counted is not None else len(listed(result.get("pages")))


def billed_pages(answer: Any) -> int | None:
    """What a poll answer says the extractor billed (`usage.pages`), else None."""
    usage = answer.get("usage") if isinstance(answer, dict) else None
    return whole(usage.get("pages")) if isinstance(usage, dict) else None
