"""What the API's viewsets over a client's own rows share."""

from django.http import Http404
from rest_framework import mixins, viewsets

from jobtracking.api.query import StrictQueryParameters
from jobtracking.errors import ApplicationError


class ClientRowsViewSet(
    StrictQueryParameters,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """`model`'s rows, listed and read through a scoping selector (`rows(user=…)`); the
    serializer each action reads (`action_serializers`, else `serializer_class`); and one problem
    for a row that does not exist and one the caller may not see, so existence does not leak."""

    model: type
    action_serializers: dict = {}
    not_found: type[ApplicationError]
    not_found_message: str  # formatted with the looked-up `pk`

    def rows(self, *, user):
        raise NotImplementedError

    def get_serializer_class(self):
        return self.action_serializers.get(self.action, self.serializer_class)

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular reads the model only
            return self.model.objects.none()
        return self.rows(user=self.request.user)

    def get_object(self):
        try:
            return super().get_object()
        except Http404:
            raise self.not_found(self.not_found_message.format(pk=self.kwargs.get("pk"))) from None
