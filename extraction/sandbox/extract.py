"""What the sandbox extractor really does with a document: text per page and key/value pairs."""

import csv
import io
import re
import time
from typing import Any

from pypdf import PdfReader
from pypdf.errors import PdfReadError

from extraction.clients.base import bare_media_type

MODEL = "sandbox-extractor/1.0"

# Linear time: where two quantifiers meet, at most one character could go to either, so a long
# line that does not match is given up at once, not retried split every way (as `[\d,]*\.?\d+`
# was: quadratic, and the regex engine holds the GIL, so it stalled the whole server). Lines
# beyond MAX_LINE_CHARS are text only, never looked at for a pair.
KEY = re.compile(r"[A-Za-z][A-Za-z0-9 &/()'.,-]{0,60}")
NUMBER = re.compile(r"\(?-?[$€£]?\s*-?[\d,]*(?:\.\d+|\d)\)?")
MAX_LINE_CHARS = 1000


class UnsupportedDocumentError(Exception):
    """The sandbox does not read this kind of file (answered 415 at submission)."""


class CorruptDocumentError(Exception):
    """The file claims a kind the sandbox reads but cannot be read (the job fails)."""


class DocumentTooLargeError(CorruptDocumentError):
    """Reading it would pass the bounds on pages, text or time (the job fails)."""


class Deadline:
    """The time bound on reading one document, checked between steps (pages, lines)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise DocumentTooLargeError(f"Reading the document took over {self.seconds:g} s.")


def detect_kind(content: bytes, file_name: str, content_type: str) -> str:
    name = file_name.lower()
    media = bare_media_type(content_type)
    if content.startswith(b"%PDF") or media == "application/pdf" or name.endswith(".pdf"):
        return "pdf"
    if media in ("text/csv", "application/csv") or name.endswith(".csv"):
        return "csv"
    if media.startswith("text/") or name.endswith((".txt", ".text", ".md")):
        return "text"
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        raise UnsupportedDocumentError(
            f"Unsupported document type {media or 'unknown'} ({file_name or 'unnamed'})"
        ) from None
    return "text"


def parse_number(text: str) -> float | None:
    cleaned = text.strip()
    if not NUMBER.fullmatch(cleaned):
        return None
    negative = cleaned.startswith("(") or "-" in cleaned
    digits = re.sub(r"[^\d.]", "", cleaned)
    try:
        value = float(digits)
    except ValueError:
        return None
    return -value if negative else value


def key_values(text: str, page: int, deadline: Deadline | None = None) -> list[dict[str, Any]]:
    """`Key: value` lines: a key of at most 61 characters, starting with a letter."""
    pairs = []
    for line in text.splitlines():
        if deadline:
            deadline.check()
        if len(line) > MAX_LINE_CHARS:
            continue
        key, colon, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if colon and value and KEY.fullmatch(key):
            pairs.append({"key": key, "value": value, "number": parse_number(value), "page": page})
    return pairs


# Bounds per document: a small PDF can expand to gigabytes of content streams or take minutes.
# The time bound covers the whole reading, the search for key/value pairs included.
MAX_PAGES = 500
MAX_TEXT_CHARS = 20 << 20
MAX_SECONDS = 10.0


def _pdf_pages(content: bytes, deadline: Deadline) -> list[str]:
    """Text per page, within the bounds; past one of them, or on anything pypdf raises (its own
    decompression limits included), the document is refused for good."""
    texts, size = [], 0
    try:
        reader = PdfReader(io.BytesIO(content))
        if len(reader.pages) > MAX_PAGES:
            raise DocumentTooLargeError(f"The PDF has more than {MAX_PAGES} pages.")
        for page in reader.pages:
            deadline.check()
            texts.append(page.extract_text() or "")
            size += len(texts[-1])
            if size > MAX_TEXT_CHARS:
                raise DocumentTooLargeError(f"The PDF holds over {MAX_TEXT_CHARS} characters.")
    except DocumentTooLargeError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError) as error:
        raise CorruptDocumentError(f"Cannot read the PDF: {error}") from None
    except Exception as error:  # pypdf's limits and its internal errors alike: never a crash
        raise CorruptDocumentError(f"Cannot read the PDF ({type(error).__name__})") from None
    return texts


def _csv_rows(content: bytes) -> list[list[str]]:
    text = content.decode("utf-8-sig", "replace")
    try:
        dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    return [
        row for row in csv.reader(io.StringIO(text), dialect) if any(cell.strip() for cell in row)
    ]


def extract(content: bytes, file_name: str = "", content_type: str = "") -> dict[str, Any]:
    """The sandbox's result document for one file, within MAX_SECONDS."""
    deadline = Deadline(MAX_SECONDS)
    kind = detect_kind(content, file_name, content_type)
    tables: list[dict[str, Any]] = []
    if kind == "pdf":
        texts = _pdf_pages(content, deadline)
    elif kind == "csv":
        rows = _csv_rows(content)
        tables.append({"page": 1, "rows": rows})
        texts = ["\n".join(": ".join(row) if len(row) == 2 else ", ".join(row) for row in rows)]
    else:
        # A form feed separates pages in plain text, as printers have always done.
        texts = content.decode("utf-8", "replace").split("\f")
    pages = [{"number": n, "text": text.strip()} for n, text in enumerate(texts, start=1)]
    return {
        "model": MODEL,
        "kind": kind,
        "page_count": len(pages),
        "pages": pages,
        "key_values": [
            pair for page in pages for pair in key_values(page["text"], page["number"], deadline)
        ],
        "tables": tables,
    }
