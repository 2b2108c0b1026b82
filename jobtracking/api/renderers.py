"""Renderers: JSON written by orjson, and the browsable API for a person (a refused form comes
back as the page again, with the problem shown and each field's errors next to it; DRF only
does that for its own error shape)."""

import orjson
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import override_method

from jobtracking.infra.storable import safe_text


class FastJSONRenderer(JSONRenderer):
    """DRF's JSON written by orjson: a bulk answer's 500 jobs in a sixth of the time. DRF's own
    encoder still writes what orjson leaves to it (times, lazy strings), so the text is DRF's;
    what orjson refuses (an integer beyond 64 bits) and indented output go to DRF."""

    OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if data is None or self.get_indent(accepted_media_type, renderer_context or {}):
            return super().render(data, accepted_media_type, renderer_context)
        try:
            text = orjson.dumps(data, default=self.encoder_class().default, option=self.OPTIONS)
        except orjson.JSONEncodeError:
            return super().render(data, accepted_media_type, renderer_context)
        # As DRF does: U+2028 and U+2029 end lines in JavaScript.
        return text.replace("\u2028".encode(), b"\\u2028").replace("\u2029".encode(), b"\\u2029")


class FormErrorsBrowsableAPIRenderer(BrowsableAPIRenderer):
    def render(self, data, accepted_media_type=None, renderer_context=None):
        # The page shows the request as sent (a refused form is filled in again with it), which
        # may hold a lone surrogate: written as U+FFFD rather than failing to encode (a 500).
        return safe_text(super().render(data, accepted_media_type, renderer_context))

    def get_rendered_html_form(self, data, view, method, request):
        refused = isinstance(data, dict) and isinstance(data.get("errors"), dict)
        if refused and request.method == method and hasattr(view, "get_serializer"):
            with override_method(view, request, method) as request:
                if self.show_form_for_method(view, method, request, None):
                    serializer = view.get_serializer(data=request.data)
                    serializer.is_valid()
                    return self.render_form_for_serializer(serializer)
        return super().get_rendered_html_form(data, view, method, request)
