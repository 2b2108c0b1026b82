"""Does an upload's content match the type its client declared? A Windows executable named
`budget.pdf` must not reach an extractor, nor sit in our storage, as a PDF."""

import codecs

HEAD_BYTES = 8192
SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "application/pdf": (b"%PDF-",),
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/tiff": (b"II*\x00", b"MM\x00*"),
    # Office Open XML documents are ZIP archives.
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": (b"PK\x03\x04",),
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": (b"PK\x03\x04",),
}
TEXT_TYPES = frozenset({"text/plain", "text/csv"})


def content_matches(content_type: str, head: bytes) -> bool:
    """`head` is the file's first `HEAD_BYTES`. Text must be UTF-8 without NUL bytes; other
    types must start with their signature. A type we hold no signature for passes."""
    if content_type in TEXT_TYPES:
        try:
            codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
        except UnicodeDecodeError:
            return False
        return b"\x00" not in head
    signatures = SIGNATURES.get(content_type)
    return signatures is None or head.startswith(signatures)
