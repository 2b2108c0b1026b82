from django.apps import AppConfig


class JobtrackingConfig(AppConfig):
    name = "jobtracking"
    verbose_name = "Job tracking"
