from django.contrib import admin
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from jobtracking.admin.dashboard import dashboard_view
from jobtracking.admin.usage import usage_view
from jobtracking.api import errors, problems
from jobtracking.api.views import HealthzView, MetricsView, ReadyzView

urlpatterns = [
    path("admin/dashboard/", admin.site.admin_view(dashboard_view), name="jobs-dashboard"),
    path("admin/usage/", admin.site.admin_view(usage_view), name="jobs-usage"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("jobtracking.api.urls")),
    path("api/problems/", problems.problem_index, name="problems"),
    path("api/problems/<slug:code>", problems.problem_page, name="problem"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's init script as its own request: the CSP (config.csp)
    # allows no inline script, and that one carries a per-request CSRF token (no hash fits it).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="docs"),
    path("healthz", HealthzView.as_view(), name="healthz"),
    path("readyz", ReadyzView.as_view(), name="readyz"),
    path("metrics", MetricsView.as_view(), name="metrics"),
    # Browsers ask for it on every page: the static icon, named per request (as the
    # production manifest names it).
    path("favicon.ico", lambda request: redirect(static("jobtracking/favicon.svg"))),
]

handler404 = errors.json_error_view(404, "not_found", "No such resource.")
handler500 = errors.server_error
