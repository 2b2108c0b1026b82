"""An extraction result as a person checks it: the key/value pairs found, the tables (spans
honoured) and the text of each page. Two shapes are read: the job protocol's (the sandbox:
`key_values[]` of `{key, value, page}`, `tables[]` of `{page, rows}`, `pages[].text`) and Azure
Document Intelligence's `analyzeResult` (`keyValuePairs[]`, `tables[]` of cells with indexes and
spans, `pages[]` of lines or spans of `content`).

The payload is the extractor's word: pure functions of it, where anything without the expected
shape is skipped (or shown empty), never an error, and sizes are bounded so that a hostile
payload cannot make the page huge."""

from dataclasses import dataclass
from typing import Any

MAX_PAIRS = 2000
MAX_TABLES = 100
MAX_ROWS = 500
MAX_COLUMNS = 50
# Azure's cell kinds that label other cells (the rest, "content" and "description", are data).
HEADER_KINDS = {"columnHeader", "rowHeader", "stubHead"}


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: str
    page: int | None
    confidence: float | None

    @property
    def confidence_shown(self) -> str:
        return "—" if self.confidence is None else f"{self.confidence:.0%}"


@dataclass(frozen=True)
class Cell:
    text: str
    header: bool = False
    row_span: int = 1
    column_span: int = 1


@dataclass(frozen=True)
class Table:
    page: int | None
    caption: str
    rows: list[list[Cell]]
    truncated: bool  # rows or columns beyond MAX_ROWS or MAX_COLUMNS were left out


@dataclass(frozen=True)
class ResultView:
    key_values: list[KeyValue]
    tables: list[Table]
    pages: list[tuple[Any, str]]
    more_pairs: int  # pairs beyond MAX_PAIRS, not shown
    more_tables: int

    @property
    def has_confidence(self) -> bool:
        return any(pair.confidence is not None for pair in self.key_values)


def shape_result(payload: Any) -> ResultView:
    document = payload if isinstance(payload, dict) else {}
    pairs = _list(document.get("key_values")) or _list(document.get("keyValuePairs"))
    tables = _list(document.get("tables"))
    return ResultView(
        key_values=[pair for pair in map(key_value, pairs[:MAX_PAIRS]) if pair is not None],
        tables=[table for table in map(table_view, tables[:MAX_TABLES]) if table is not None],
        pages=page_texts(payload),
        more_pairs=max(len(pairs) - MAX_PAIRS, 0),
        more_tables=max(len(tables) - MAX_TABLES, 0),
    )


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _whole(value: Any, least: int = 0) -> int | None:
    """A whole number (not a boolean) of at least `least`, else None."""
    return value if type(value) is int and value >= least else None


def text(value: Any) -> str:
    """What a field says: a string, a number, or Azure's `{"content": …}` element."""
    if isinstance(value, dict):
        value = value.get("content")
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return ""


def page_of(element: Any) -> int | None:
    """The page an element is on: the job protocol's `page`, else Azure's first bounding
    region's `pageNumber`."""
    if not isinstance(element, dict):
        return None
    if _whole(element.get("page"), 1) is not None:
        return element["page"]
    regions = _list(element.get("boundingRegions"))
    if regions and isinstance(regions[0], dict):
        return _whole(regions[0].get("pageNumber"), 1)
    return None


def key_value(pair: Any) -> KeyValue | None:
    if not isinstance(pair, dict):
        return None
    key = text(pair.get("key"))
    if not key:
        return None
    confidence = pair.get("confidence")
    valid = isinstance(confidence, int | float) and not isinstance(confidence, bool)
    return KeyValue(
        key=key,
        value=text(pair.get("value")),
        page=page_of(pair) or page_of(pair.get("key")) or page_of(pair.get("value")),
        confidence=float(confidence) if valid and 0 <= confidence <= 1 else None,
    )


def table_view(table: Any) -> Table | None:
    if not isinstance(table, dict):
        return None
    if isinstance(table.get("cells"), list):
        rows, truncated = _grid(table)
    elif isinstance(table.get("rows"), list):
        rows, truncated = _plain_rows(table["rows"])
    else:
        return None
    return Table(
        page=page_of(table), caption=text(table.get("caption")), rows=rows, truncated=truncated
    )


def _plain_rows(raw_rows: list) -> tuple[list[list[Cell]], bool]:
    """The job protocol's rows of cell texts, padded to the widest row."""
    lists = [row for row in raw_rows if isinstance(row, list)]
    width = max((len(row) for row in lists), default=0)
    truncated = len(lists) > MAX_ROWS or width > MAX_COLUMNS
    width = min(width, MAX_COLUMNS)
    rows = []
    for row in lists[:MAX_ROWS]:
        texts = [text(value) for value in row[:width]]
        rows.append([Cell(value) for value in texts + [""] * (width - len(texts))])
    return rows, truncated


def _grid(table: dict) -> tuple[list[list[Cell]], bool]:
    """Azure's cells placed on the table's grid. Each cell takes its span where the span is still
    free (an overlapping or repeated cell is cut back or dropped) and a position no cell covers
    gets an empty cell, so that every row of the HTML table lines up."""
    cells = []
    for cell in _list(table.get("cells")):
        if isinstance(cell, dict):
            row, column = _whole(cell.get("rowIndex")), _whole(cell.get("columnIndex"))
            if row is not None and column is not None:
                cells.append((row, column, cell))
    height = max([_whole(table.get("rowCount")) or 0] + [row + 1 for row, _, _ in cells])
    width = max([_whole(table.get("columnCount")) or 0] + [column + 1 for _, column, _ in cells])
    truncated = height > MAX_ROWS or width > MAX_COLUMNS
    height, width = min(height, MAX_ROWS), min(width, MAX_COLUMNS)

    covered: set[tuple[int, int]] = set()
    placed: dict[tuple[int, int], Cell] = {}
    for row, column, cell in cells:
        if row >= height or column >= width or (row, column) in covered:
            continue
        wanted_columns = min(_whole(cell.get("columnSpan"), 1) or 1, width - column)
        columns = 1
        while columns < wanted_columns and (row, column + columns) not in covered:
            columns += 1
        wanted_rows = min(_whole(cell.get("rowSpan"), 1) or 1, height - row)
        rows = 1
        while rows < wanted_rows and not any(
            (row + rows, c) in covered for c in range(column, column + columns)
        ):
            rows += 1
        covered.update(
            (r, c) for r in range(row, row + rows) for c in range(column, column + columns)
        )
        placed[row, column] = Cell(text(cell), cell.get("kind") in HEADER_KINDS, rows, columns)

    grid = []
    for row in range(height):
        line = []
        for column in range(width):
            if (row, column) in placed:
                line.append(placed[row, column])
            elif (row, column) not in covered:
                line.append(Cell(""))
        grid.append(line)
    return grid, truncated


def page_texts(payload: Any) -> list[tuple[Any, str]]:
    """The text of each page: the job protocol's `pages[].text`, or Azure's
    `pages[].lines[].content` (else the page's spans of `content`)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("pages"), list):
        return []
    content = payload.get("content") if isinstance(payload.get("content"), str) else ""
    texts = []
    for number, page in enumerate(payload["pages"], start=1):
        if not isinstance(page, dict):
            continue
        if isinstance(page.get("text"), str):
            page_text = page["text"]
        elif isinstance(page.get("lines"), list):
            page_text = "\n".join(
                str(line.get("content", "")) for line in page["lines"] if isinstance(line, dict)
            )
        else:
            spans = _list(page.get("spans"))
            page_text = "".join(span_text(content, span) for span in spans)
        texts.append((page.get("number", page.get("pageNumber", number)), page_text))
    return texts


def span_text(content: str, span: Any) -> str:
    """The part of `content` a span names; nothing unless its offset and length are whole
    numbers (not booleans) of at least 0."""
    if not isinstance(span, dict):
        return ""
    offset, length = _whole(span.get("offset", 0)), _whole(span.get("length", 0))
    if offset is None or length is None:
        return ""
    return content[offset : offset + length]
