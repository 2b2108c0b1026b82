"""The staff console. Each module registers its models' admins."""

from django.contrib import admin

from jobtracking.admin import audit, extractors, jobs, tokens, webhooks

# Django's navigation sidebar takes 280 px of every page: at 1366 px the jobs list then needs a
# horizontal scroll. The index and the breadcrumbs lead everywhere it does.
admin.site.enable_nav_sidebar = False

__all__ = ["audit", "extractors", "jobs", "tokens", "webhooks"]
