"""The staff console. Each module registers its models' admins."""

from django.contrib import admin
from django.urls import reverse_lazy

from jobtracking.admin import (
    audit,
    batches,
    budgets,
    extractors,
    jobs,
    tokens,
    usage,
    webhooks,
)

# Django's navigation sidebar takes 280 px of every page: at 1366 px the jobs list then needs a
# horizontal scroll. The index and the breadcrumbs lead everywhere it does.
admin.site.enable_nav_sidebar = False
admin.site.site_header = admin.site.site_title = "Extraction job tracking"
admin.site.index_title = "Staff console"
# The site has no home page of its own: "View site" opens the API docs (the dashboard has its
# button on the index).
admin.site.site_url = reverse_lazy("docs")

__all__ = ["audit", "batches", "budgets", "extractors", "jobs", "tokens", "usage", "webhooks"]
