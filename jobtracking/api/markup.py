"""The little Markdown our own texts are written in (problem descriptions, the API's view
docstrings), as HTML: paragraphs, `code` spans and [links](url). Only our texts go through it,
and they use nothing more; the `markdown` package would be a dependency for that."""

import re

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from rest_framework.views import get_view_description

CODE = re.compile(r"`([^`]+)`")
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def _inline(text: str) -> str:
    # Split on code spans first: what is inside one is shown as written, links too.
    parts = CODE.split(text)
    return "".join(
        f"<code>{escape(part)}</code>"
        if index % 2
        else LINK.sub(r'<a href="\2">\1</a>', str(escape(part)))
        for index, part in enumerate(parts)
    )


def render(text: str) -> SafeString:
    """`text` as HTML paragraphs (blank lines part them; line breaks within one are spaces)."""
    paragraphs = [" ".join(part.split()) for part in PARAGRAPH_BREAK.split(text.strip())]
    return mark_safe("".join(f"<p>{_inline(p)}</p>" for p in paragraphs if p))


def view_description(view, html: bool = False) -> str:
    """DRF's VIEW_DESCRIPTION_FUNCTION: the view's docstring, rendered for the browsable API."""
    text = get_view_description(view, html=False)
    return render(text) if html else text
