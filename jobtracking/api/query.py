"""No silent leniency in query strings: a parameter an endpoint does not read is refused by
name (as unknown body fields are), and so is an ordering it cannot sort by."""

from rest_framework.exceptions import ValidationError
from rest_framework.filters import OrderingFilter
from rest_framework.settings import api_settings


class StrictQueryParameters:
    """For API views: the parameters a view reads are its filter set's, its ordering's, its
    paginator's, `format`, and those it names in `query_parameters` (by action for viewsets)."""

    query_parameters: dict[str, set[str]] | set[str] = set()

    def initial(self, request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)  # authentication and permissions first
        known = self.known_query_parameters()
        if unknown := sorted(set(request.query_params) - known):
            takes = ", ".join(sorted(known - {"format"})) or "no parameters"
            raise ValidationError(
                {
                    name: [f"Unknown query parameter. This endpoint takes: {takes}."]
                    for name in unknown
                }
            )
        self.check_ordering(request)

    def known_query_parameters(self) -> set[str]:
        known = {"format"}
        extra = self.query_parameters
        known |= (
            extra.get(getattr(self, "action", None), set()) if isinstance(extra, dict) else extra
        )
        if filterset_class := getattr(self, "filterset_class", None):
            known |= set(filterset_class.base_filters)
        if self._sorts():
            known.add(api_settings.ORDERING_PARAM)
        if paginator := getattr(self, "paginator", None):
            known |= {paginator.cursor_query_param, paginator.page_size_query_param}
        return known

    def _sorts(self) -> bool:
        return OrderingFilter in getattr(self, "filter_backends", ()) and bool(
            getattr(self, "ordering_fields", None)
        )

    def check_ordering(self, request) -> None:
        raw = request.query_params.get(api_settings.ORDERING_PARAM)
        if raw is None or not self._sorts():
            return
        allowed = [f"{sign}{name}" for name in self.ordering_fields for sign in ("", "-")]
        if wrong := [term for term in raw.split(",") if term.strip() not in allowed]:
            raise ValidationError(
                {
                    api_settings.ORDERING_PARAM: [
                        f"Cannot order by {', '.join(map(repr, wrong))}: use {', '.join(allowed)}."
                    ]
                }
            )
