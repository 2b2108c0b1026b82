"""The browsable API for a person: a refused form comes back as the page again, with the
problem shown and each field's errors next to it (DRF only does that for its own error shape)."""

from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.request import override_method


class FormErrorsBrowsableAPIRenderer(BrowsableAPIRenderer):
    def get_rendered_html_form(self, data, view, method, request):
        refused = isinstance(data, dict) and isinstance(data.get("errors"), dict)
        if refused and request.method == method and hasattr(view, "get_serializer"):
            with override_method(view, request, method) as request:
                if self.show_form_for_method(view, method, request, None):
                    serializer = view.get_serializer(data=request.data)
                    serializer.is_valid()
                    return self.render_form_for_serializer(serializer)
        return super().get_rendered_html_form(data, view, method, request)
