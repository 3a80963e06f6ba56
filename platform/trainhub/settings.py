"""Django settings for TrainHub, read from the environment (DESIGN.md §2 "Settings")."""

from __future__ import annotations

import ipaddress
import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.conf import global_settings
from django.core.exceptions import ImproperlyConfigured

# Pure Python (no Django): the policy names are checked here, before anything starts.
from trainhub.envsettings import env_count, env_flag, env_list, env_rate
from trainhub.notifications.conf import *  # noqa: F403 -- EMAIL_*, WEBHOOK_*, NOTIFY_*
from trainhub.scheduling.policy import POLICIES

BASE_DIR = Path(__file__).resolve().parent
REPO_DIR = BASE_DIR.parent.parent
DATA_DIR = Path(os.environ.get("TRAINHUB_DATA_DIR", REPO_DIR / "var")).resolve()
(DATA_DIR / "static").mkdir(parents=True, exist_ok=True)  # SQLite (and STATIC_ROOT, by default)

_DEFAULT_SECRET = "insecure-standalone-secret-change-me"
SECRET_KEY = os.environ.get("TRAINHUB_SECRET_KEY", _DEFAULT_SECRET)
SECRET_KEY_FALLBACKS = env_list("TRAINHUB_SECRET_KEY_FALLBACKS")  # old keys, while rotating
ENVIRONMENT = os.environ.get("TRAINHUB_ENV", "development")
DEBUG = os.environ.get("TRAINHUB_DEBUG", "0") == "1"

if ENVIRONMENT == "production":
    if SECRET_KEY == _DEFAULT_SECRET:
        raise ImproperlyConfigured("TRAINHUB_SECRET_KEY must be set in production.")
    if DEBUG:
        raise ImproperlyConfigured("TRAINHUB_DEBUG must be off in production.")

# How many reverse proxies in front of TrainHub append to X-Forwarded-For: 0 (the default)
# keys rate limits on the connection's own address; N on the Nth address from the right.
TRUSTED_PROXIES = env_count("TRAINHUB_TRUSTED_PROXIES", 0)

if ENVIRONMENT == "production":
    # HTTPS behind a reverse proxy that sets X-Forwarded-Proto (deploy/nginx.conf). At
    # start-up `trainhub.api.production` refuses to go on while `check --deploy` objects.
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env_count("TRAINHUB_HSTS_SECONDS", 31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_flag("TRAINHUB_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_flag("TRAINHUB_HSTS_PRELOAD", True)
    SECURE_SSL_REDIRECT = env_flag("TRAINHUB_SSL_REDIRECT", True)
    # Probes from inside the cluster speak plain HTTP.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
    # An operator's explicit opt-outs silence the deploy check that would object to them.
    SILENCED_SYSTEM_CHECKS = [
        check
        for check, opted_out in (
            ("security.W008", not SECURE_SSL_REDIRECT),  # the proxy redirects to HTTPS
            ("security.W021", not SECURE_HSTS_PRELOAD),
        )
        if opted_out
    ]

ALLOWED_HOSTS = env_list("TRAINHUB_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("TRAINHUB_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "django_filters",
    "trainhub.audit",
    "trainhub.tenancy",
    "trainhub.nodes",
    "trainhub.jobs",
    "trainhub.telemetry",
    "trainhub.registry",
    "trainhub.scheduling",
    "trainhub.notifications",
    "trainhub.experiments",
    "trainhub.agents",
    "trainhub.api",
    "trainhub.web",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "trainhub.urls"
ASGI_APPLICATION = "trainhub.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "trainhub.web.context_processors.navigation",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{DATA_DIR / 'trainhub.sqlite3'}"),
        conn_max_age=0,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A pool of connections per process (psycopg_pool): the agent gateway and the web
    # pages run their database work on several threads at once without paying for a new
    # connection each time (docs/design.md, "Agent gateway"). Off (0) unless set: the
    # deploy files set it for the web processes.
    _POOL_SIZE = int(os.environ.get("TRAINHUB_DB_POOL_SIZE", "0"))
    if _POOL_SIZE > 0:
        DATABASES["default"]["OPTIONS"] = {
            "pool": {"min_size": 1, "max_size": _POOL_SIZE, "timeout": 30}
        }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes share the file in standalone mode: wait for locks, don't fail.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's defaults, with a minimum length of 12. They apply wherever a password is chosen
# (the API's user creation, the admin's forms), not to `create_user` itself.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": 12},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = Path(os.environ.get("TRAINHUB_STATIC_ROOT", DATA_DIR / "static"))
# The bundle `make` builds from frontend/ (npm), served by WhiteNoise from the finders (no
# collectstatic step), or with TRAINHUB_STATIC_MANIFEST (the image runs collectstatic at
# build time) under hashed names that browsers keep for a year.
STATICFILES_DIRS = [os.environ.get("TRAINHUB_FRONTEND_DIST", REPO_DIR / "frontend" / "dist")]
WHITENOISE_USE_FINDERS = not env_flag("TRAINHUB_STATIC_MANIFEST", False)
if not WHITENOISE_USE_FINDERS:
    _MANIFEST = {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"}
    STORAGES = {**global_settings.STORAGES, "staticfiles": _MANIFEST}
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

REDIS_URL = os.environ.get("REDIS_URL", "")
# Installations (or test runs) that share one Redis keep apart by this prefix.
REDIS_KEY_PREFIX = os.environ.get("TRAINHUB_CHANNEL_PREFIX", "trainhub")

if REDIS_URL:
    # The pub/sub layer needs no blocking list commands, so the same layer runs on Redis in
    # services mode and on standalone's embedded broker.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": REDIS_KEY_PREFIX},
        }
    }
else:
    # Only inside one process (unit tests): services mode and standalone set REDIS_URL.
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# The cache holds the rate limits' counts (and the job page's start forecasts): in Redis
# when REDIS_URL is set, so all web processes count into one limit (N per-process counts
# would allow N times the rate); per process without it (unit tests, a bare runserver).
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": REDIS_KEY_PREFIX,
            "OPTIONS": {"socket_connect_timeout": 5, "socket_timeout": 5},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Who hears the domain events lower layers publish (trainhub/events.py), after commit:
# the browser feed, the scheduler's cycle trigger, the agent gateway, notifications.
EVENT_HANDLERS = [
    "trainhub.telemetry.live.on_event",
    "trainhub.scheduling.triggers.on_event",
    "trainhub.agents.notify.on_event",
    "trainhub.notifications.handlers.on_event",
    "trainhub.experiments.handlers.on_event",
]

# What a team's jobs use and hold, for the team admin (tenancy sits below jobs, so it reads
# this through the named function rather than importing it).
TEAM_USAGE_READER = "trainhub.jobs.usage.quota_usage"

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
SCHEDULING_INTERVAL_SECONDS = float(os.environ.get("TRAINHUB_SCHEDULING_INTERVAL", "5"))
# Events (submit, finish, cancel, node, quota) within this window share one cycle.
SCHEDULING_DEBOUNCE_SECONDS = float(os.environ.get("TRAINHUB_SCHEDULING_DEBOUNCE", "0.5"))
# The policy the scheduler applies: cfs (fair share, DESIGN.md §3), fifo or priority.
SCHEDULER_POLICY = os.environ.get("TRAINHUB_SCHEDULER_POLICY", "cfs")
if SCHEDULER_POLICY not in POLICIES:
    raise ImproperlyConfigured(
        f"TRAINHUB_SCHEDULER_POLICY={SCHEDULER_POLICY!r} is not a policy; "
        f"choose one of {', '.join(sorted(POLICIES))}"
    )
# Observe-only: every cycle logs what it would do (starts, resizes, preemptions) and does
# none of it, so a policy change can be tried on the live cluster safely.
SCHEDULER_OBSERVE_ONLY = os.environ.get("TRAINHUB_SCHEDULER_OBSERVE_ONLY", "").lower() in (
    "1",
    "true",
    "yes",
)
# TLS for the runtime's gRPC between a job's tasks (trainhub.jobs.pki): "auto" (default)
# unless every task of the job is on a loopback address, "on" always, "off" never.
RUNTIME_TLS = os.environ.get("TRAINHUB_RUNTIME_TLS", "auto").strip().lower() or "auto"
if RUNTIME_TLS not in ("auto", "on", "off"):
    raise ImproperlyConfigured(f"TRAINHUB_RUNTIME_TLS={RUNTIME_TLS!r}: use auto, on or off")
# A preempted job's coordinator gets this long to save a checkpoint before it is killed.
PREEMPTION_GRACE_SECONDS = float(os.environ.get("TRAINHUB_PREEMPTION_GRACE", "60"))
# A waiting job rises one priority level per this many seconds (aging: nothing starves).
SCHEDULER_AGING_SECONDS_PER_LEVEL = float(os.environ.get("TRAINHUB_SCHEDULER_AGING", "900"))

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "trainhub.api.token_auth.BoundedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "trainhub.api.schema.ErrorDocumentingAutoSchema",
    # JSON only (415 for anything else); the code upload view takes multipart itself.
    "DEFAULT_PARSER_CLASSES": ["trainhub.api.parsers.StrictJSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    # The Accept header chooses the format; no `?format=` second way.
    "URL_FORMAT_OVERRIDE": None,
    "DEFAULT_PAGINATION_CLASS": "trainhub.api.pagination.BoundedLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_THROTTLE_RATES": {
        # Shared by every sign-in form (API token, /login/, /admin/login/) and enrollment.
        "auth": env_rate("TRAINHUB_AUTH_RATE", "30/minute"),
        # Per user: submitting (dry runs too) and cloning jobs.
        "submit": env_rate("TRAINHUB_SUBMIT_RATE", "60/minute"),
    },
    # Throttles key on the client address as TRUSTED_PROXIES gives it, never on a header
    # the client chooses.
    "NUM_PROXIES": TRUSTED_PROXIES,
}

# The longest a personal API token may live; one asked for without an expiry gets this.
TOKEN_MAX_DAYS = env_count("TRAINHUB_TOKEN_MAX_DAYS", 90)
if TOKEN_MAX_DAYS < 1:
    raise ImproperlyConfigured("TRAINHUB_TOKEN_MAX_DAYS must be 1 or more")

REST_KNOX = {
    # Tokens from the sign-in endpoint (`trainhub login`).
    "TOKEN_TTL": timedelta(days=min(30, TOKEN_MAX_DAYS)),
    "AUTH_HEADER_PREFIX": "Token",
    "AUTO_REFRESH": False,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "TrainHub API",
    "DESCRIPTION": "Teams, nodes and parameter-server training jobs.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and the docs page are for signed-in users (session or API token).
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "TeamRoleEnum": "trainhub.tenancy.choices.Role",
        "TaskRoleEnum": "trainhub.jobs.choices.TaskRole",
        "NotifyEventEnum": "trainhub.notifications.choices.NotifyEvent",
        "PriorityEnum": "trainhub.tenancy.choices.Priority",
    },
    "COMPONENT_SPLIT_REQUEST": True,
    # Operations are tagged by the first path segment after this (jobs, teams, nodes…).
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    # 3.1 is JSON Schema: `propertyNames` (node labels) and the rest mean what they say.
    "OAS_VERSION": "3.1.0",
    "GET_LIB_DOC_EXCLUDES": "trainhub.api.schema.lib_doc_excludes",
}

# Telemetry budgets per job: metric points and log bytes beyond them are not stored, only
# counted (the job page and the metrics/logs answers show the count).
TELEMETRY_METRIC_POINTS_PER_JOB = int(
    float(os.environ.get("TRAINHUB_METRIC_POINTS_PER_JOB", "10000000"))
)
TELEMETRY_LOG_BYTES_PER_JOB = int(float(os.environ.get("TRAINHUB_LOG_BYTES_PER_JOB", str(1024**3))))
# Retention: raw metric points and log lines of jobs finished longer ago than this many
# days are deleted (rollups are kept, so charts stay); 0 keeps everything.
TELEMETRY_RETENTION_DAYS = float(os.environ.get("TRAINHUB_TELEMETRY_RETENTION_DAYS", "0"))
# How often Celery beat looks for telemetry past retention (when retention is on).
TELEMETRY_RETENTION_INTERVAL_SECONDS = 3600.0

# Operator metrics (`/metrics`, Prometheus text format): who may scrape. A bearer token,
# and/or client networks (comma-separated addresses or CIDRs; the client address as
# TRUSTED_PROXIES gives it); platform admins signed in may always read it. Neither set:
# only platform admins.
METRICS_TOKEN = os.environ.get("TRAINHUB_METRICS_TOKEN", "")


def _networks(name: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    nets = []
    for item in env_list(name):
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {item!r} is not an address or CIDR") from exc
    return nets


METRICS_ALLOW = _networks("TRAINHUB_METRICS_ALLOW")
if METRICS_TOKEN and len(METRICS_TOKEN) < 16:
    raise ImproperlyConfigured("TRAINHUB_METRICS_TOKEN: use at least 16 characters")

# Node liveness: a node not heard from for this long gets no new tasks.
NODE_LOST_AFTER_SECONDS = float(os.environ.get("TRAINHUB_NODE_LOST_AFTER", "30"))
# A node on which the tasks of this many jobs in a row fail at start is cordoned, with the
# reason on its page (`nodes.quarantine`); 0 turns it off. A task "fails at start" when it
# ends failed before it ran, or within NODE_START_FAILURE_SECONDS of starting.
NODE_QUARANTINE_AFTER = int(os.environ.get("TRAINHUB_NODE_QUARANTINE_AFTER", "3"))
NODE_START_FAILURE_SECONDS = float(os.environ.get("TRAINHUB_NODE_START_FAILURE_SECONDS", "10"))
# Lifetime of a node credential (a fraction is fine: tests use seconds); the agent
# renews its own at two thirds of it.
NODE_CREDENTIAL_DAYS = float(os.environ.get("TRAINHUB_NODE_CREDENTIAL_DAYS", "30"))
# Ports handed to PS and worker tasks on a node.
# Below Linux's ephemeral range (32768-60999), so outgoing connections never hold them.
TASK_PORT_RANGE = (
    int(os.environ.get("TRAINHUB_TASK_PORT_MIN", "24000")),
    int(os.environ.get("TRAINHUB_TASK_PORT_MAX", "31999")),
)
CHECKPOINT_ROOT = os.environ.get("TRAINHUB_CHECKPOINT_ROOT", str(DATA_DIR / "checkpoints"))
# Registered models (`trainhub.registry`): one zip per version, `<team>/<name>/<version>.zip`.
MODEL_ROOT = os.environ.get("TRAINHUB_MODEL_ROOT", str(DATA_DIR / "models"))
# Users' code archives (POST /api/v1/code/): the upload limit, and where they are kept.
CODE_MAX_BYTES = int(float(os.environ.get("TRAINHUB_CODE_MAX_MB", "100")) * 1024 * 1024)
CODE_DIR = DATA_DIR / "code"
# The URL nodes reach this server at (install commands); unset: the request's own URL.
# TRAINHUB_PUBLIC_URL, its name before 2026-11, is still read when the new one is unset.
EXTERNAL_URL = (
    os.environ.get("TRAINHUB_EXTERNAL_URL") or os.environ.get("TRAINHUB_PUBLIC_URL", "")
).rstrip("/")
# Where the trainhub-runtime wheel that /agent/dist/ serves is kept (built there on
# first request when the source tree is at hand; the image builds it in, see deploy/).
AGENT_DIST_DIR = Path(os.environ.get("TRAINHUB_AGENT_DIST_DIR", DATA_DIR / "agent-dist"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    # A refused request (403, 400) is one line, not a traceback (trainhub.web.errors).
    "filters": {"one_line_4xx": {"()": "trainhub.web.errors.OneLineClientErrors"}},
    "root": {"handlers": ["console"], "level": os.environ.get("TRAINHUB_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        "django.request": {"filters": ["one_line_4xx"]},
        "httpx": {"level": "WARNING"},  # its INFO lines hold URLs (webhook tokens)
    },
}
