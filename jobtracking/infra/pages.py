"""The billable pages of an upload that the service can know before an extractor reads it:
what the usage budgets count for a job before submitting it (`services.budgets`)."""

import logging

from django.core.files import File
from pypdf import PdfReader

logger = logging.getLogger(__name__)

# An image is one page (Azure counts each image as one), but for a TIFF, which may hold many.
ONE_PAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/bmp", "image/heif", "image/gif"})


def known_pages(upload: File, content_type: str) -> int | None:
    """A PDF's page count as pypdf reads it (the sandbox extractor counts the same way), one
    page for a single-page image type, or None: unknown (another type, or a PDF that pypdf
    cannot read, which the extractor judges)."""
    if content_type in ONE_PAGE_TYPES:
        return 1
    if content_type != "application/pdf":
        return None
    try:
        upload.seek(0)
        return len(PdfReader(upload, strict=False).pages) or None
    except Exception:  # pypdf's own errors and its internal ones alike: unknown, never a crash
        logger.info("Could not count the pages of the upload %s", upload.name, exc_info=True)
        return None
    finally:
        upload.seek(0)
