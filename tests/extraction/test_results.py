"""Each protocol's result read into the one shape (`extraction.results`), without a browser or
a database: both extractors' real results, tables with spans, and payloads of every wrong shape."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extraction.documents import azure_di, job_protocol
from extraction.models import Adapter
from extraction.registry import ADAPTERS, result_document
from extraction.results import MAX_COLUMNS, MAX_ROWS, Cell, Document, KeyValue, Page
from extraction.sandbox.extract import extract

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "extraction" / "sandbox" / "samples"
AZURE = ROOT / "tests" / "extraction" / "fixtures" / "azure_di" / "result_succeeded.json"


def azure_result() -> dict:
    return json.loads(AZURE.read_text())["body"]["analyzeResult"]


def texts(rows: list[list[Cell]]) -> list[list[str]]:
    return [[cell.text for cell in row] for row in rows]


def test_reader_reads_the_sandbox_pairs_and_pages():
    content = (SAMPLES / "grant-report.txt").read_bytes()
    view = job_protocol.read(extract(content, "grant-report.txt", "text/plain"))
    assert KeyValue("Grant number", "FX-2025-0147", 1, None) in view.key_values
    assert not view.has_confidence
    assert view.tables == []
    assert "Reporting period: Q2 2025" in view.pages[0].text


def test_reader_reads_the_sandbox_csv_table():
    content = (SAMPLES / "budget.csv").read_bytes()
    (table,) = job_protocol.read(extract(content, "budget.csv", "text/csv")).tables
    assert table.page == 1 and not table.truncated
    assert texts(table.rows)[:2] == [["Line item", "Amount"], ["Personnel", "412000"]]


def test_reader_reads_the_azure_pairs_with_page_and_confidence():
    view = azure_di.read(azure_result())
    assert view.key_values == [
        KeyValue("Total revenue:", "1,234,500", 1, 0.93),
        KeyValue("Total assets:", "2,104,300", 2, 0.88),
    ]
    assert view.has_confidence and view.key_values[1].confidence_shown == "88%"
    assert [page.number for page in view.pages] == [1, 2]


def test_reader_reads_the_azure_table_with_its_spans():
    (table,) = azure_di.read(azure_result()).tables
    assert (table.page, table.caption, table.truncated) == (2, "Balance Sheet", False)
    assert table.rows == [
        [Cell("Category", header=True), Cell("Amount", header=True, column_span=2)],
        [Cell("Assets", header=True, row_span=2), Cell("Cash"), Cell("104,300")],
        [Cell("Buildings"), Cell("2,000,000")],  # the first column is under "Assets"
    ]


def test_table_view_gives_uncovered_positions_an_empty_cell():
    table = azure_di.table(
        {
            "rowCount": 2,
            "columnCount": 2,
            "cells": [{"rowIndex": 1, "columnIndex": 1, "content": "x"}],
        }
    )
    assert texts(table.rows) == [["", ""], ["", "x"]]


def test_table_view_cuts_an_overlapping_span_back():
    cells = [
        {"rowIndex": 0, "columnIndex": 1, "rowSpan": 2, "content": "tall"},
        {"rowIndex": 0, "columnIndex": 0, "columnSpan": 3, "content": "wide"},
        {"rowIndex": 0, "columnIndex": 1, "content": "repeated"},
    ]
    table = azure_di.table({"rowCount": 2, "columnCount": 3, "cells": cells})
    assert table.rows[0] == [Cell("wide"), Cell("tall", row_span=2), Cell("")]
    assert texts(table.rows) == [["wide", "tall", ""], ["", ""]]


def test_table_view_bounds_a_huge_table():
    cells = [{"rowIndex": 10**9, "columnIndex": 10**9, "rowSpan": 10**9, "content": "far"}]
    table = azure_di.table({"rowCount": 10**12, "columnCount": 10**12, "cells": cells})
    assert table.truncated
    assert len(table.rows) == MAX_ROWS and all(len(row) == MAX_COLUMNS for row in table.rows)


def test_page_texts_read_the_azure_shape():
    azure = {
        "content": "Hello world\nSecond page",
        "pages": [
            {"pageNumber": 1, "lines": [{"content": "Hello"}, {"content": "world"}]},
            {"pageNumber": 2, "spans": [{"offset": 12, "length": 11}]},
        ],
    }
    assert azure_di.pages(azure) == [Page(1, "Hello\nworld"), Page(2, "Second page")]
    assert azure_di.pages({"status": "no pages"}) == []


def assert_grid_lines_up(rows: list[list[Cell]]) -> None:
    """Every position of the table is covered by exactly one cell, as an HTML table needs."""
    taken: set[tuple[int, int]] = set()
    width = None
    for r, row in enumerate(rows):
        c = 0
        for cell in row:
            while (r, c) in taken:
                c += 1
            for dr in range(cell.row_span):
                for dc in range(cell.column_span):
                    assert (r + dr, c + dc) not in taken
                    taken.add((r + dr, c + dc))
            c += cell.column_span
        while (r, c) in taken:
            c += 1
        assert width in (None, c), f"row {r} is {c} wide, not {width}"
        width = c
        assert r + max((cell.row_span for cell in row), default=1) <= len(rows)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
INDEX = st.integers(-2, 6) | st.none() | st.booleans() | st.floats(-1, 6) | st.text(max_size=2)
CELL = st.fixed_dictionaries(
    {},
    optional={
        "rowIndex": INDEX,
        "columnIndex": INDEX,
        "rowSpan": INDEX,
        "columnSpan": INDEX,
        "kind": st.sampled_from(["columnHeader", "rowHeader", "content", 3, None]),
        "content": JSON,
    },
)
TABLE = st.fixed_dictionaries(
    {"cells": st.lists(CELL | JSON, max_size=12)},
    optional={"rowCount": INDEX, "columnCount": INDEX, "caption": JSON, "boundingRegions": JSON},
)
PAYLOAD = JSON | st.fixed_dictionaries(
    {},
    optional={
        "tables": st.lists(TABLE | st.fixed_dictionaries({"rows": JSON}) | JSON, max_size=3),
        "keyValuePairs": st.lists(JSON, max_size=4),
        "key_values": JSON,
        "pages": JSON,
        "content": JSON,
    },
)


@settings(max_examples=300, deadline=None)
@given(PAYLOAD)
@pytest.mark.parametrize("read", [job_protocol.read, azure_di.read])
def test_each_reader_reads_what_it_can_of_any_payload(read, payload):
    view = read(payload)
    for table in view.tables:
        assert_grid_lines_up(table.rows)
    for pair in view.key_values:
        assert isinstance(pair.key, str) and pair.key and isinstance(pair.value, str)
        assert pair.confidence is None or 0 <= pair.confidence <= 1


SMALL = st.integers(0, 5)
SPANNING_TABLE = st.fixed_dictionaries(
    {
        "rowCount": SMALL,
        "columnCount": SMALL,
        "cells": st.lists(
            st.fixed_dictionaries(
                {"rowIndex": SMALL, "columnIndex": SMALL, "content": st.text(max_size=3)},
                optional={"rowSpan": st.integers(0, 4), "columnSpan": st.integers(0, 4)},
            ),
            max_size=12,
        ),
    }
)


@settings(max_examples=300, deadline=None)
@given(SPANNING_TABLE)
def test_table_view_lines_up_cells_whose_spans_overlap(table):
    assert_grid_lines_up(azure_di.table(table).rows)


def test_each_adapter_reads_its_own_protocol_s_result():
    sandbox = extract((SAMPLES / "budget.csv").read_bytes(), "budget.csv", "text/csv")
    for adapter in (Adapter.SANDBOX, Adapter.HTTP_ASYNC):
        assert result_document(adapter, sandbox) == job_protocol.read(sandbox)
    assert result_document(Adapter.AZURE_DI, azure_result()) == azure_di.read(azure_result())
    # Each reads its own format only: Azure's pairs are not the job protocol's.
    assert result_document(Adapter.HTTP_ASYNC, azure_result()).key_values == []
    assert all(isinstance(client.document(None), Document) for client in ADAPTERS.values())


def test_the_one_shape_is_plain_json():
    shaped = azure_di.read(azure_result()).as_dict()
    assert json.loads(json.dumps(shaped)) == shaped
    assert set(shaped) == {"pages", "key_values", "tables", "more_pairs", "more_tables"}
    assert shaped["tables"][0]["rows"][0][1] == {
        "text": "Amount",
        "header": True,
        "row_span": 1,
        "column_span": 2,
    }


# Words of Azure's result format: none belongs in the job domain, which reads the one shape.
AZURE_WORDS = ("analyzeResult", "keyValuePairs", "boundingRegions", "columnSpan", "pageNumber")


def test_the_job_domain_reads_no_extractor_format():
    found = {
        str(path.relative_to(ROOT)): [word for word in AZURE_WORDS if word in path.read_text()]
        for path in sorted((ROOT / "jobtracking").rglob("*.py"))
    }
    assert {path: words for path, words in found.items() if words} == {}
