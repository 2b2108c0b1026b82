"""The Content-Security-Policy of every HTML page the site serves: the admin and its dashboard,
the API docs, the browsable API and the problem pages. They load nothing from elsewhere, so the
policy allows this origin only; our own scripts and styles live in static files.

Django 5.2 has no CSP support of its own (6.0 does), and the policy is one constant: a small
middleware rather than a dependency."""

import base64
import hashlib

from django.conf import settings
from django.utils.html import escape
from rest_framework.compat import pygments_css

from jobtracking.api.renderers import FormErrorsBrowsableAPIRenderer


def style_hash(css: str) -> str:
    digest = hashlib.sha256(css.encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


# Inline <style> blocks in templates we do not own, allowed by hash rather than 'unsafe-inline'.
# drf-spectacular's Swagger UI page (drf_spectacular/swagger_ui.html) opens with this block;
# tests/config/test_csp.py fails when an upgrade changes it.
SWAGGER_UI_STYLE = (
    "\n      html { box-sizing: border-box; overflow-y: scroll; }"
    "\n      *, *:after, *:before { box-sizing: inherit; }"
    "\n      body { background: #fafafa; margin: 0; }\n    "
)
# The browsable API writes its code-highlighting CSS inline (autoescaped) when Pygments is
# installed.
_code_style = pygments_css(FormErrorsBrowsableAPIRenderer.code_style)
BROWSABLE_API_STYLE = escape(_code_style) if _code_style else None
INLINE_STYLES = [css for css in (SWAGGER_UI_STYLE, BROWSABLE_API_STYLE) if css]

POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        " ".join(["style-src 'self'", *map(style_hash, INLINE_STYLES)]),
        # style="…" attributes only (never <style> blocks): Django admin's, DRF's and our status
        # badges use them, and an attribute cannot run script.
        "style-src-attr 'unsafe-inline'",
        "img-src 'self' data:",
        "object-src 'none'",
        "base-uri 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ]
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        html = response.get("Content-Type", "").startswith("text/html")
        # DEBUG's technical 404 and 500 pages are built of inline styles and scripts.
        debug_page = settings.DEBUG and response.status_code >= 400
        if html and not debug_page:
            response.headers.setdefault("Content-Security-Policy", POLICY)
        return response
