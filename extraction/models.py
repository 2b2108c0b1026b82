import fnmatch
import os
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models


class Adapter(models.TextChoices):
    AZURE_DI = "azure_di", "Azure AI Document Intelligence"
    HTTP_ASYNC = "http_async", "Generic async job protocol"
    SANDBOX = "sandbox", "Bundled sandbox extractor"


def key_env_allowed(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in settings.EXTRACTOR_KEY_ENV_PATTERNS)


def validate_key_env(name: str) -> None:
    if name and not key_env_allowed(name):
        allowed = ", ".join(settings.EXTRACTOR_KEY_ENV_PATTERNS)
        raise ValidationError(
            f"Keys are read only from environment variables named like {allowed}.",
            code="key_env_not_allowed",
        )


# Azure AI Document Intelligence's default (S0) limits: 15 analyze calls and 50 polls a second.
DEFAULT_RATES = {Adapter.AZURE_DI: {"submit": 15.0, "poll": 50.0}}


class Extractor(models.Model):
    """One configured external extractor. Its API key lives only in the environment variable
    named by `api_key_env`; the database never holds the key itself."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    adapter = models.CharField(max_length=20, choices=Adapter.choices)
    base_url = models.URLField(max_length=500)
    model_id = models.CharField(
        max_length=200, blank=True, help_text="Model to run, e.g. prebuilt-layout (Azure)."
    )
    api_key_env = models.CharField(
        max_length=100,
        blank=True,
        validators=[validate_key_env],
        help_text="Name of the environment variable that holds the API key "
        "(EXTRACTOR_KEY_ENV_PATTERNS says which names are allowed).",
    )
    request_timeout = models.DurationField(default=timedelta(seconds=30))
    poll_initial_interval = models.DurationField(default=timedelta(seconds=2))
    poll_max_interval = models.DurationField(default=timedelta(seconds=30))
    max_duration = models.DurationField(
        default=timedelta(hours=1), help_text="A job's deadline, counted from its (re)queueing."
    )
    max_submit_attempts = models.PositiveIntegerField(default=5, validators=[MinValueValidator(1)])
    max_poll_errors = models.PositiveIntegerField(default=10, validators=[MinValueValidator(1)])
    max_in_flight = models.PositiveIntegerField(
        default=0, help_text="Cap on concurrently submitted jobs; 0 means no cap."
    )
    submit_rate = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text="Submissions per second across every worker; 0 means no limit, empty the "
        "adapter's default (Azure: 15).",
    )
    poll_rate = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text="Polls and result fetches per second across every worker; 0 means no limit, "
        "empty the adapter's default (Azure: 50).",
    )
    reuse_window = models.DurationField(
        null=True,
        blank=True,
        help_text="Reuse a result for the same client's identical document (same SHA-256, model "
        "and options) that succeeded within this long, instead of calling the extractor again; "
        "empty: never reuse.",
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        permissions = [
            (
                "change_extractor_endpoint",
                "Can change where an extractor is and which key variable it sends",
            )
        ]

    def __str__(self) -> str:
        return self.slug

    def rate_limit(self, kind: str) -> float:
        """Calls per second allowed for `kind` ("submit" or "poll"); 0 means no limit."""
        configured = self.submit_rate if kind == "submit" else self.poll_rate
        if configured is None:
            return DEFAULT_RATES.get(self.adapter, {}).get(kind, 0.0)
        return configured

    def api_key(self) -> str:
        """The key from the environment, or "" when none is configured. A variable whose name is
        not allowed is never read, whatever the row says (checked again at call time)."""
        if not self.api_key_env or not key_env_allowed(self.api_key_env):
            return ""
        return os.environ.get(self.api_key_env, "")
