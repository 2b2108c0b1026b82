"""The staff console. Each module registers its models' admins."""

from jobtracking.admin import audit, jobs, webhooks

__all__ = ["audit", "jobs", "webhooks"]
