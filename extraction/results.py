"""An extraction result in one shape, whichever extractor made it: its pages' text, the key/value
pairs found and its tables (cells with their spans). Each adapter's client reads its own
protocol's result into it (`ExtractorClient.document`); the admin's result page, the API and any
later feature read this shape and never an extractor's format.

A result is the extractor's word: readers are pure functions of it, where anything without the
expected shape is skipped (or read as empty), never an error, and sizes are bounded so that a
hostile result cannot make a page or an answer huge."""

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_PAIRS = 2000
MAX_TABLES = 100
MAX_ROWS = 500
MAX_COLUMNS = 50


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: str
    page: int | None
    confidence: float | None  # 0 to 1; None where the extractor gives none

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
    # Rows of cells as an HTML table lays them out: a cell spanning rows or columns covers
    # positions that the rows below or the cells beside it leave out.
    rows: list[list[Cell]]
    truncated: bool  # rows or columns beyond MAX_ROWS or MAX_COLUMNS were left out


@dataclass(frozen=True)
class Page:
    number: Any  # as the extractor numbers it (from 1)
    text: str


@dataclass(frozen=True)
class Document:
    pages: list[Page] = field(default_factory=list)
    key_values: list[KeyValue] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    more_pairs: int = 0  # pairs beyond MAX_PAIRS, left out
    more_tables: int = 0

    @property
    def has_confidence(self) -> bool:
        return any(pair.confidence is not None for pair in self.key_values)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def document(pages: list[Page], pairs: list, tables: list, pair, table) -> Document:
    """The document of these pages, and of the pairs and tables read by `pair` and `table`
    (each returns None for an element it cannot read), within the bounds."""
    return Document(
        pages=pages,
        key_values=[found for found in map(pair, pairs[:MAX_PAIRS]) if found is not None],
        tables=[found for found in map(table, tables[:MAX_TABLES]) if found is not None],
        more_pairs=max(len(pairs) - MAX_PAIRS, 0),
        more_tables=max(len(tables) - MAX_TABLES, 0),
    )


def listed(value: Any) -> list:
    return value if isinstance(value, list) else []


def whole(value: Any, least: int = 0) -> int | None:
    """A whole number (not a boolean) of at least `least`, else None."""
    return value if type(value) is int and value >= least else None


def text(value: Any) -> str:
    """What a field says: a string, a number, or an element's `{"content": …}`."""
    if isinstance(value, dict):
        value = value.get("content")
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return ""


def confidence(value: Any) -> float | None:
    valid = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if valid and 0 <= value <= 1 else None


def key_value(pair: Any, page: Callable[[dict], int | None]) -> KeyValue | None:
    """A `{key, value, confidence?}` pair, on the page `page` reads from it; None without a
    key. Both protocols write pairs so; they differ in where the page is."""
    if not isinstance(pair, dict) or not (key := text(pair.get("key"))):
        return None
    return KeyValue(
        key=key,
        value=text(pair.get("value")),
        page=page(pair),
        confidence=confidence(pair.get("confidence")),
    )
