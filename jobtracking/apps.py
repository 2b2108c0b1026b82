from axes.apps import AppConfig as AxesConfig
from django.apps import AppConfig
from django.conf import settings
from django.db.backends.signals import connection_created
from django.db.models.signals import pre_delete


class JobtrackingConfig(AppConfig):
    default = True  # the app's own config; the module also holds django-axes' below
    name = "jobtracking"
    verbose_name = "Job tracking"

    def ready(self) -> None:
        from jobtracking.infra.timestamps import use_compiled_timestamps
        from jobtracking.infra.tracing import configure_from_environment
        from jobtracking.services.subscriptions import subscriptions_end_with_their_creator

        connection_created.connect(use_compiled_timestamps, dispatch_uid="compiled_timestamps")

        # Before any request is served: Django's instrumentation adds its middleware.
        configure_from_environment()

        pre_delete.connect(
            subscriptions_end_with_their_creator,
            sender=settings.AUTH_USER_MODEL,
            dispatch_uid="subscriptions_end_with_their_creator",
        )


class LoginLockoutsConfig(AxesConfig):
    """django-axes under what it is for staff: the admin index says "Login lockouts", not the
    library's name."""

    verbose_name = "Login lockouts"
