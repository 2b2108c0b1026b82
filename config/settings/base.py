"""Settings shared by every environment; everything that varies is read from the environment."""

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_days(name: str, default: int) -> int:
    """A number of days: a negative one would make fresh jobs purgeable, so it stops start-up."""
    raw = os.environ.get(name, str(default))
    if not (raw.isascii() and raw.isdigit()):
        raise ImproperlyConfigured(f"{name} must be a whole number of days (0 or more): {raw!r}")
    return int(raw)


def env_required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ImproperlyConfigured(f"The environment variable {name} must be set.")
    return value


DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "jobtracking.apps.LoginLockoutsConfig",  # django-axes, named for staff
    "extraction",
    "jobtracking",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "config.csp.ContentSecurityPolicyMiddleware",
    "jobtracking.api.errors.ApiProblemMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it answers a locked-out login.
    "axes.middleware.AxesMiddleware",
]

# Messages in the (database) session, not in a cookie: a cookie is signed but readable by
# whoever holds it, and some messages carry secrets shown once (a webhook's signing secret).
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

# Password logins (the admin) go through django-axes first: after AXES_FAILURE_LIMIT failures for
# one username from one address, that pair is locked out for AXES_COOLOFF_TIME.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("AXES_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(minutes=int(os.environ.get("AXES_COOLOFF_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# The same client address as the API's brake, through the trusted proxies.
AXES_CLIENT_IP_CALLABLE = "jobtracking.api.auth.client_address"
# API tokens: failed authentications per client address in a window, before 429.
API_AUTH_FAILURE_LIMIT = int(os.environ.get("API_AUTH_FAILURE_LIMIT", "10"))
API_AUTH_FAILURE_WINDOW_SECONDS = int(os.environ.get("API_AUTH_FAILURE_WINDOW_SECONDS", "300"))
# Reverse proxies in front of Django: 0 takes the client's address from REMOTE_ADDR; N from the
# Nth entry from the right of X-Forwarded-For (see jobtracking.api.auth.client_address).
API_TRUSTED_PROXY_COUNT = int(os.environ.get("API_TRUSTED_PROXY_COUNT", "0"))

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def database_from_env() -> dict:
    """`DATABASE_URL`, or a local SQLite file tuned so web, workers and dispatcher can share it."""
    url = os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
    config = dj_database_url.parse(url, conn_max_age=int(os.environ.get("DB_CONN_MAX_AGE", "60")))
    if config["ENGINE"] == "django.db.backends.sqlite3":
        config["CONN_MAX_AGE"] = 0
        config["OPTIONS"] = {
            # WAL lets readers and one writer work at once; IMMEDIATE takes the write lock at
            # BEGIN so concurrent writers wait (busy timeout) instead of failing mid-transaction.
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    else:
        config["CONN_HEALTH_CHECKS"] = True
        # psycopg prepares a statement on a connection's first run of it (0), or never (None,
        # Django's default: a PgBouncer before 1.21 cannot carry prepared statements). Django's
        # own cursors bind parameters client-side and never prepare; job creation's statement
        # binds them server-side (`jobtracking.infra.rows.prepared_cursor`).
        prepared = env_bool("DB_PREPARED_STATEMENTS", True)
        config.setdefault("OPTIONS", {})["prepare_threshold"] = 0 if prepared else None
    return config


DATABASES = {"default": database_from_env()}
# A batch's covering index (`job_batch_status_idx`) INCLUDEs columns on PostgreSQL; SQLite (the
# zero-setup default) builds it without them, which is all Django's warning says.
SILENCED_SYSTEM_CHECKS = ["models.W040"]
# While the database cannot be reached (a restart, a failover), requests answer 503 with this
# Retry-After instead of 500 (see jobtracking.infra.dbfaults).
DATABASE_UNAVAILABLE_RETRY_AFTER_SECONDS = int(
    os.environ.get("DATABASE_UNAVAILABLE_RETRY_AFTER_SECONDS", "5")
)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
FORMAT_MODULE_PATH = ["config.formats"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT", BASE_DIR / "staticfiles"))
MEDIA_URL = "media/"
MEDIA_ROOT = Path(os.environ.get("DJANGO_MEDIA_ROOT", BASE_DIR / "media"))


def archive_storage() -> dict:
    """Where `purge_jobs` archives jobs before deleting them (docs/archive.md): an S3 bucket
    when `ARCHIVE_S3_BUCKET` is set (credentials from boto3's usual environment, never from
    here), else local files under `DJANGO_ARCHIVE_ROOT`."""
    if bucket := os.environ.get("ARCHIVE_S3_BUCKET"):
        return {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": bucket,
                "location": os.environ.get("ARCHIVE_S3_PREFIX", ""),
                "endpoint_url": os.environ.get("ARCHIVE_S3_ENDPOINT_URL") or None,
                "region_name": os.environ.get("ARCHIVE_S3_REGION") or None,
                # An archive file is never replaced: a name taken gets a suffix instead.
                "file_overwrite": False,
            },
        }
    root = Path(os.environ.get("DJANGO_ARCHIVE_ROOT", BASE_DIR / "archive"))
    return {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": root}}


STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "archive": archive_storage(),
}

# django-q2 on the ORM broker. A task that outlives `retry` is handed to a second worker,
# so `timeout` (the hard kill) must stay well below `retry`. Our tasks are short HTTP calls;
# the job row's own counters, not the broker, limit attempts.
Q_WORKERS = int(os.environ.get("Q_WORKERS", "2"))
Q_CLUSTER = {
    "name": "jobtracking",
    "orm": "default",
    "workers": Q_WORKERS,
    # Tasks a cluster takes from the broker ahead of its workers (django-q2's default is
    # workers squared). Each is a batch of jobs that a more urgent job claimed after it would
    # wait behind (see jobtracking.engine.dispatcher).
    "queue_limit": Q_WORKERS,
    "timeout": int(os.environ.get("Q_TIMEOUT", "60")),
    "retry": int(os.environ.get("Q_RETRY", "120")),
    "max_attempts": 3,
    "ack_failures": True,
    # Our audit trail records every job change; keeping django-q2 successes too costs the
    # monitor a locked scan of the success table per task. Failures are still kept.
    "save_limit": -1,
    "catch_up": False,
    "poll": 0.2,
    "label": "Task queue",
}

# Job domain settings.
JOBS_RESULT_INLINE_MAX_BYTES = int(os.environ.get("JOBS_RESULT_INLINE_MAX_BYTES", "262144"))
# Audit checkpoints (docs/audit.md): their key is read from AUDIT_SIGNING_KEY at each use, never
# kept here. A checkpoint covers changes older than this lag: their transactions have committed.
AUDIT_CHECKPOINT_LAG_SECONDS = int(os.environ.get("AUDIT_CHECKPOINT_LAG_SECONDS", "60"))
JOBS_OPTIONS_MAX_BYTES = int(os.environ.get("JOBS_OPTIONS_MAX_BYTES", "8192"))
JOBS_METADATA_MAX_BYTES = int(os.environ.get("JOBS_METADATA_MAX_BYTES", "8192"))

# LOG_FORMAT=json gives one JSON object a line, with the job's id, attempt, extractor and event
# on every line written while a job is being processed (see jobtracking.infra.logs).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"job_context": {"()": "jobtracking.infra.logs.JobContextFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(job_prefix)s%(message)s"},
        "json": {"()": "jobtracking.infra.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": os.environ.get("LOG_FORMAT", "plain"),
            "filters": ["job_context"],
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        # django-q2 writes a line per task enqueued and run: noise in commands and `make run`,
        # and in production the engine logs each job's moves itself. Q_LOG_LEVEL=INFO shows them.
        "django-q": {"level": os.environ.get("Q_LOG_LEVEL", "WARNING")},
        # The lockout app: its start-up banner and four lines a login; lockouts are warnings.
        "axes": {"level": "WARNING"},
        # Each request is logged once, by the server's access line (runserver's here, through
        # our handler and format: no colours; gunicorn's in production). Django would add a
        # line per 4xx through its own console handler and ours; only its 5xx are kept, with
        # their traceback.
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "django.request": {"level": "ERROR"},
        "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}

# Extractor keys are read only from environment variables whose names match these patterns
# (fnmatch, comma-separated): whoever configures an extractor must not be able to name
# DATABASE_URL, the secret key or any other variable and have it sent to a server of their choice.
EXTRACTOR_KEY_ENV_PATTERNS = env_list("EXTRACTOR_KEY_ENV_PATTERNS", "EXTRACTOR_*_KEY")

# Extractor calls: an answer larger than this is refused (results included).
EXTRACTOR_MAX_RESPONSE_BYTES = int(os.environ.get("EXTRACTOR_MAX_RESPONSE_BYTES", str(64 << 20)))

# Job engine. A dispatched job's due_at moves this far ahead, so a lost task is retried after it.
JOBS_DISPATCH_LEASE_SECONDS = float(os.environ.get("JOBS_DISPATCH_LEASE_SECONDS", "30"))
# How long a stopping worker cluster may take before its whole process group is killed.
JOBS_WORKER_STOP_GRACE_SECONDS = float(os.environ.get("JOBS_WORKER_STOP_GRACE_SECONDS", "10"))
JOBS_DISPATCH_BATCH_SIZE = int(os.environ.get("JOBS_DISPATCH_BATCH_SIZE", "200"))
JOBS_DISPATCH_IDLE_SECONDS = float(os.environ.get("JOBS_DISPATCH_IDLE_SECONDS", "0.5"))
# Woken by a new job, the dispatcher waits this long so that jobs created with it share a batch.
JOBS_DISPATCH_GATHER_SECONDS = float(os.environ.get("JOBS_DISPATCH_GATHER_SECONDS", "0.05"))
# The dispatcher claims no more jobs while this many tasks for each live worker wait in the
# broker (the clusters say how many workers they have).
JOBS_DISPATCH_QUEUED_PER_WORKER = int(os.environ.get("JOBS_DISPATCH_QUEUED_PER_WORKER", "2"))
# Batches in their transactions at once on one machine, whatever its workers and clusters (0:
# the cores the process may use; see jobtracking.infra.compute_slots).
JOBS_COMPUTE_SLOTS = int(os.environ.get("JOBS_COMPUTE_SLOTS", "0"))
# Jobs of one extractor per task; the task makes all their extractor calls at once.
JOBS_TASK_BATCH_SIZE = int(os.environ.get("JOBS_TASK_BATCH_SIZE", "25"))
# Kept-alive connections to each extractor per worker process: a batch's calls all go at once.
EXTRACTOR_POOL_SIZE = int(os.environ.get("EXTRACTOR_POOL_SIZE", str(JOBS_TASK_BATCH_SIZE)))
# A submission lease lasts the extractor's request timeout plus this margin.
JOBS_SUBMIT_LEASE_MARGIN_SECONDS = float(os.environ.get("JOBS_SUBMIT_LEASE_MARGIN_SECONDS", "30"))
# A URL job whose extractor does not report the document (Azure): the service fetches the
# source itself (`extraction.sources`); no read waits longer than this, and none starts after it.
# Its lease grows by twice this.
JOBS_SOURCE_FETCH_TIMEOUT_SECONDS = float(os.environ.get("JOBS_SOURCE_FETCH_TIMEOUT_SECONDS", "60"))
# When an extractor's max_in_flight is reached, a pending job looks again after this long.
JOBS_IN_FLIGHT_RETRY_SECONDS = float(os.environ.get("JOBS_IN_FLIGHT_RETRY_SECONDS", "1"))
# Of each claim round, in-flight cap and submission rate, the share kept for priorities below
# the highest one waiting, so that bulk work moves while interactive work goes first.
JOBS_PRIORITY_RESERVED_SHARE = float(os.environ.get("JOBS_PRIORITY_RESERVED_SHARE", "0.1"))

# Circuits (jobtracking.services.circuits): this many transient failures in a row, with no
# success between them, open a dependency's circuit (an extractor, a webhook receiver); then
# only a probe goes out, after 1 s, 2 s, 4 s … at most CIRCUIT_PROBE_MAX_SECONDS apart.
CIRCUIT_FAILURES = int(os.environ.get("CIRCUIT_FAILURES", "5"))
CIRCUIT_PROBE_FIRST_SECONDS = float(os.environ.get("CIRCUIT_PROBE_FIRST_SECONDS", "1"))
CIRCUIT_PROBE_MAX_SECONDS = float(os.environ.get("CIRCUIT_PROBE_MAX_SECONDS", "15"))

# Outbound URLs given by clients (source_url, webhooks) must be public unless named here.
OUTBOUND_ALLOWED_HOSTS = env_list("OUTBOUND_ALLOWED_HOSTS")
OUTBOUND_ALLOWED_NETWORKS = env_list("OUTBOUND_ALLOWED_NETWORKS")
OUTBOUND_ALLOWED_ORIGINS = env_list("OUTBOUND_ALLOWED_ORIGINS")  # scheme://host:port

# API limits.
JOBS_UPLOAD_MAX_BYTES = int(os.environ.get("JOBS_UPLOAD_MAX_BYTES", str(50 << 20)))
JOBS_UPLOAD_CONTENT_TYPES = env_list(
    "JOBS_UPLOAD_CONTENT_TYPES",
    "application/pdf,text/plain,text/csv,image/png,image/jpeg,image/tiff,"
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document,"
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
)
JOBS_BULK_MAX = int(os.environ.get("JOBS_BULK_MAX", "500"))
# How long a web process remembers a token (with its user's permissions) and an extractor; a
# revoked token or a disabled extractor takes effect within this time (0 turns it off).
API_LOOKUP_CACHE_SECONDS = float(os.environ.get("API_LOOKUP_CACHE_SECONDS", "10"))
# The event feed hides events younger than this, so that a consumer paging by id does not skip
# an event whose transaction commits after a later id's.
JOBS_EVENT_FEED_SETTLE_SECONDS = float(os.environ.get("JOBS_EVENT_FEED_SETTLE_SECONDS", "1"))
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 << 20
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 << 20

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "jobtracking.api.auth.HashedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.UserRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"user": os.environ.get("API_THROTTLE_RATE", "6000/min")},
    "DEFAULT_PARSER_CLASSES": [
        "jobtracking.api.parsers.SafeJSONParser",
        "rest_framework.parsers.MultiPartParser",
        "jobtracking.api.parsers.FormParser",
    ],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "jobtracking.api.schema.ProblemAutoSchema",
    "EXCEPTION_HANDLER": "jobtracking.api.errors.problem_exception_handler",
    "VIEW_DESCRIPTION_FUNCTION": "jobtracking.api.markup.view_description",
    "DEFAULT_RENDERER_CLASSES": [
        "jobtracking.api.renderers.FastJSONRenderer",
        "jobtracking.api.renderers.FormErrorsBrowsableAPIRenderer",
    ],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Extraction job tracking API",
    "DESCRIPTION": "Jobs that send one file to an external extractor, their history and results.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Nothing is anonymous but /healthz: log in to the admin (session) or send a token.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # One name for the event types, wherever they appear (events, webhook endpoints).
    "ENUM_NAME_OVERRIDES": {"EventTypeEnum": "jobtracking.states.EVENT_TYPES"},
}

# Webhooks: secrets are derived from this key (see jobtracking.webhooks); rotating it changes them.
WEBHOOK_SIGNING_KEY = os.environ.get("WEBHOOK_SIGNING_KEY", "")  # empty: use SECRET_KEY
WEBHOOK_CONNECT_TIMEOUT = float(os.environ.get("WEBHOOK_CONNECT_TIMEOUT", "5"))
WEBHOOK_READ_TIMEOUT = float(os.environ.get("WEBHOOK_READ_TIMEOUT", "10"))
# After a rotation, deliveries are signed with the old secret too for this long (Standard
# Webhooks' several signatures in one header), so that receivers switch without a gap.
WEBHOOK_SECRET_GRACE_HOURS = float(os.environ.get("WEBHOOK_SECRET_GRACE_HOURS", "24"))
# The delivery lane (jobtracking.engine.delivery_lane): deliveries claimed a round, POSTs at
# once, and how long it sleeps when none is due.
WEBHOOK_LANE_BATCH_SIZE = int(os.environ.get("WEBHOOK_LANE_BATCH_SIZE", "100"))
WEBHOOK_CONCURRENCY = int(os.environ.get("WEBHOOK_CONCURRENCY", "16"))
WEBHOOK_LANE_IDLE_SECONDS = float(os.environ.get("WEBHOOK_LANE_IDLE_SECONDS", "0.2"))
# Added to the lane process's niceness: deliveries yield the CPU to job work (0: equal share).
WEBHOOK_LANE_NICENESS = int(os.environ.get("WEBHOOK_LANE_NICENESS", "10"))
# Kept-alive connections to receivers waiting for their next POST, in all (the longest idle
# closed first), and how long one may wait: each holds a socket here and at the receiver.
WEBHOOK_IDLE_CONNECTIONS = int(os.environ.get("WEBHOOK_IDLE_CONNECTIONS", "64"))
WEBHOOK_IDLE_SECONDS = float(os.environ.get("WEBHOOK_IDLE_SECONDS", "30"))
# A test event's whole POST (connection and answer): it holds a web worker meanwhile.
WEBHOOK_TEST_TIMEOUT = float(os.environ.get("WEBHOOK_TEST_TIMEOUT", "5"))


# Retention: terminal jobs (with their history, results and events) are purged this many days
# after completion, per status.
JOBS_RETENTION_DAYS = {
    "succeeded": env_days("JOBS_RETENTION_SUCCEEDED_DAYS", 90),
    "failed": env_days("JOBS_RETENTION_FAILED_DAYS", 180),
    "timed_out": env_days("JOBS_RETENTION_TIMED_OUT_DAYS", 180),
    "cancelled": env_days("JOBS_RETENTION_CANCELLED_DAYS", 90),
}
# Purged jobs are first written to the "archive" storage; off only where no record must outlive
# retention (and for the benchmark that compares the two). The archive needs PostgreSQL: the
# zero-setup SQLite run purges without it.
JOBS_ARCHIVE_BEFORE_PURGE = env_bool(
    "JOBS_ARCHIVE_BEFORE_PURGE", DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
)
