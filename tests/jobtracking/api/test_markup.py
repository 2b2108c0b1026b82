"""The little Markdown of our texts, as HTML: code spans, links and paragraphs, everything else
escaped."""

from jobtracking.api.markup import render, view_description
from jobtracking.api.views import JobEventViewSet


def test_render_code_spans_links_and_paragraphs():
    text = 'Send `"force": true` <b>now</b>,\n  once.\n\nSee [the docs](/api/docs/).'
    assert render(text) == (
        "<p>Send <code>&quot;force&quot;: true</code> &lt;b&gt;now&lt;/b&gt;, once.</p>"
        '<p>See <a href="/api/docs/">the docs</a>.</p>'
    )


def test_render_shows_a_code_span_as_written():
    assert render("`[a](b)` and `<x>`") == ("<p><code>[a](b)</code> and <code>&lt;x&gt;</code></p>")


def test_view_description_renders_docstrings_for_the_browsable_api_only():
    view = JobEventViewSet()
    assert "<code>after=&lt;last id seen&gt;</code>" in view_description(view, html=True)
    assert "`after=<last id seen>`" in view_description(view, html=False)
