"""Azure AI Document Intelligence's `analyzeResult`: `keyValuePairs[]` (elements with
`boundingRegions`), `tables[]` of cells with indexes and spans, `pages[]` of `lines` or of spans of
the result's `content`."""

import math
from typing import Any

from extraction import results
from extraction.clients.base import bare_media_type
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

# The cell kinds that label other cells (the rest, "content" and "description", are data).
HEADER_KINDS = {"columnHeader", "rowHeader", "stubHead"}


def read(payload: Any) -> Document:
    result = payload if isinstance(payload, dict) else {}
    return document(
        pages(result),
        listed(result.get("keyValuePairs")),
        listed(result.get("tables")),
        key_value,
        table,
    )


def page_of(element: Any) -> int | None:
    """The page an element is on: its first bounding region's `pageNumber`."""
    if not isinstance(element, dict):
        return None
    regions = listed(element.get("boundingRegions"))
    if regions and isinstance(regions[0], dict):
        return whole(regions[0].get("pageNumber"), 1)
    return None


def key_value(pair: Any) -> KeyValue | None:
    """A pair on the page of its first bounding region, or of its key's or its value's."""
    return results.key_value(
        pair,
        lambda found: page_of(found) or page_of(found.get("key")) or page_of(found.get("value")),
    )


def table(found: Any) -> Table | None:
    if not isinstance(found, dict) or not isinstance(found.get("cells"), list):
        return None
    rows, truncated = grid(found)
    return Table(
        page=page_of(found), caption=text(found.get("caption")), rows=rows, truncated=truncated
    )


def grid(table: dict) -> tuple[list[list[Cell]], bool]:
    """The cells placed on the table's grid. Each cell takes its span where the span is still
    free (an overlapping or repeated cell is cut back or dropped) and a position no cell covers
    gets an empty cell, so that every row of the HTML table lines up."""
    cells = _indexed_cells(table)
    height = max([whole(table.get("rowCount")) or 0] + [row + 1 for row, _, _ in cells])
    width = max([whole(table.get("columnCount")) or 0] + [column + 1 for _, column, _ in cells])
    truncated = height > MAX_ROWS or width > MAX_COLUMNS
    height, width = min(height, MAX_ROWS), min(width, MAX_COLUMNS)
    covered: set[tuple[int, int]] = set()
    placed: dict[tuple[int, int], Cell] = {}
    for row, column, cell in cells:
        if row < height and column < width and (row, column) not in covered:
            placed[row, column] = _placed(cell, row, column, height, width, covered)
    lines = [
        [
            placed.get((row, column), Cell(""))
            for column in range(width)
            if (row, column) in placed or (row, column) not in covered
        ]
        for row in range(height)
    ]
    return lines, truncated


def _indexed_cells(table: dict) -> list[tuple[int, int, dict]]:
    """The table's cells that say where they are: (row, column, cell)."""
    cells = []
    for cell in listed(table.get("cells")):
        if isinstance(cell, dict):
            row, column = whole(cell.get("rowIndex")), whole(cell.get("columnIndex"))
            if row is not None and column is not None:
                cells.append((row, column, cell))
    return cells


def _placed(cell: dict, row: int, column: int, height: int, width: int, covered: set) -> Cell:
    """The cell at (row, column), its spans cut back to the positions still free (and within
    the grid), which it then covers."""
    wanted_columns = min(whole(cell.get("columnSpan"), 1) or 1, width - column)
    columns = 1
    while columns < wanted_columns and (row, column + columns) not in covered:
        columns += 1
    wanted_rows = min(whole(cell.get("rowSpan"), 1) or 1, height - row)
    rows = 1
    while rows < wanted_rows and not any(
        (row + rows, c) in covered for c in range(column, column + columns)
    ):
        rows += 1
    covered.update((r, c) for r in range(row, row + rows) for c in range(column, column + columns))
    return Cell(text(cell), cell.get("kind") in HEADER_KINDS, rows, columns)


def pages(result: dict) -> list[Page]:
    """Each page's `lines[].content`, else the page's spans of the result's `content`."""
    content = result.get("content") if isinstance(result.get("content"), str) else ""
    found = []
    for number, page in enumerate(listed(result.get("pages")), start=1):
        if not isinstance(page, dict):
            continue
        if isinstance(page.get("lines"), list):
            page_text = "\n".join(
                str(line.get("content", "")) for line in page["lines"] if isinstance(line, dict)
            )
        else:
            page_text = "".join(span_text(content, span) for span in listed(page.get("spans")))
        found.append(Page(page.get("pageNumber", number), page_text))
    return found


def span_text(content: str, span: Any) -> str:
    """The part of `content` a span names; nothing unless its offset and length are whole
    numbers (not booleans) of at least 0."""
    if not isinstance(span, dict):
        return ""
    offset, length = whole(span.get("offset", 0)), whole(span.get("length", 0))
    if offset is None or length is None:
        return ""
    return content[offset : offset + length]


# Azure bills these by their text, in blocks of `TEXT_PAGE_CHARACTERS` characters; every other
# type by the entries of `pages` (a PDF page, a TIFF image, an Excel sheet, a PowerPoint slide).
TEXT_BILLED_TYPES = {
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/msword",
    "text/html",
}
TEXT_PAGE_CHARACTERS = 3000


def billable_pages(payload: Any, content_type: str) -> int:
    """The pages Azure bills for this `analyzeResult` of a document of `content_type`, by its
    own rules: Word and HTML text per 3,000 characters (at least one page), anything else one
    page per entry of `pages`."""
    result = payload if isinstance(payload, dict) else {}
    if bare_media_type(content_type) in TEXT_BILLED_TYPES:
        content = result.get("content") if isinstance(result.get("content"), str) else ""
        return max(1, math.ceil(len(content) / TEXT_PAGE_CHARACTERS))
    return len(listed(result.get("pages")))
