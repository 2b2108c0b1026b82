from django.urls import include, path
from rest_framework.routers import DefaultRouter

from jobtracking.api import batch_views, usage_views, views
from jobtracking.api.webhook_endpoints import WebhookEndpointViewSet

app_name = "api"

router = DefaultRouter()
router.APIRootView = views.ServiceRootView
router.register("jobs", views.ExtractionJobViewSet, basename="job")
router.register("extractors", views.ExtractorViewSet, basename="extractor")
router.register("statuses", views.JobStatusViewSet, basename="status")
router.register("batches", batch_views.BatchViewSet, basename="batch")
router.register("events", views.JobEventViewSet, basename="event")
router.register("webhook_endpoints", WebhookEndpointViewSet, basename="webhook_endpoint")

urlpatterns = [
    path("stats/", views.StatsView.as_view(), name="stats"),
    path("usage/", usage_views.UsageView.as_view(), name="usage"),
    path("", include(router.urls)),
]
