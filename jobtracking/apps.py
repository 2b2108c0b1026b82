from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import pre_delete


class JobtrackingConfig(AppConfig):
    name = "jobtracking"
    verbose_name = "Job tracking"

    def ready(self) -> None:
        from jobtracking.services.subscriptions import subscriptions_end_with_their_creator

        pre_delete.connect(
            subscriptions_end_with_their_creator,
            sender=settings.AUTH_USER_MODEL,
            dispatch_uid="subscriptions_end_with_their_creator",
        )
