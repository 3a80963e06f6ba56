"""`TRAINHUB_ENV=production`: HTTPS settings on, and no start while `check --deploy` objects.

Each case starts a real `manage.py` process with the environment an operator would set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
GOOD_KEY = "k3y-" + "q7Zr9xW2vLp4" * 5  # 64 characters, many distinct


def _manage(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("TRAINHUB_", "DJANGO_SETTINGS"))
    }
    base.update(
        PYTHONPATH=os.pathsep.join([str(REPO / "platform"), str(REPO)]),
        TRAINHUB_DATA_DIR=str(tmp_path / "data"),
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        TRAINHUB_ENV="production",
        TRAINHUB_SECRET_KEY=GOOD_KEY,
        TRAINHUB_ALLOWED_HOSTS="trainhub.example.com",
    )
    base.update(env)
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args],
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


SHOW = (
    "import json; from django.conf import settings as s; print(json.dumps({n: getattr(s, n) "
    "for n in ('SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', 'SECURE_HSTS_SECONDS', "
    "'SECURE_SSL_REDIRECT', 'SECURE_PROXY_SSL_HEADER', 'CSRF_TRUSTED_ORIGINS', "
    "'ALLOWED_HOSTS', 'SILENCED_SYSTEM_CHECKS')}))"
)


def test_a_correct_production_config_starts_with_https_settings_on(tmp_path: Path) -> None:
    done = _manage(
        tmp_path, "shell", "-c", SHOW, TRAINHUB_CSRF_TRUSTED_ORIGINS="https://trainhub.example.com"
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown == {
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_HSTS_SECONDS": 31_536_000,
        "SECURE_SSL_REDIRECT": True,
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
        "CSRF_TRUSTED_ORIGINS": ["https://trainhub.example.com"],
        "ALLOWED_HOSTS": ["trainhub.example.com"],
        "SILENCED_SYSTEM_CHECKS": [],
    }
    deploy = _manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING")
    assert deploy.returncode == 0, deploy.stderr


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"TRAINHUB_SECRET_KEY": "short-but-not-the-default"}, "TRAINHUB_SECRET_KEY"),
        ({"TRAINHUB_ALLOWED_HOSTS": ""}, "TRAINHUB_ALLOWED_HOSTS"),
        ({"TRAINHUB_HSTS_SECONDS": "0"}, "TRAINHUB_HSTS_SECONDS"),
        ({"TRAINHUB_DEBUG": "1"}, "TRAINHUB_DEBUG"),
        ({"TRAINHUB_SECRET_KEY": ""}, "TRAINHUB_SECRET_KEY"),
    ],
)
def test_production_refuses_insecure_settings(
    tmp_path: Path, env: dict[str, str], named: str
) -> None:
    # `migrate` stands for any start: the refusal comes before the command runs.
    done = _manage(tmp_path, "migrate", "--noinput", **env)
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and named in done.stderr, done.stderr[-3000:]
    assert "Applying" not in done.stdout


def test_an_explicit_opt_out_of_the_redirect_is_allowed(tmp_path: Path) -> None:
    done = _manage(tmp_path, "check", "--deploy", TRAINHUB_SSL_REDIRECT="0")
    assert done.returncode == 0, done.stderr
    assert "security.W008" not in done.stdout + done.stderr


def test_development_is_not_held_to_the_deploy_checks(tmp_path: Path) -> None:
    done = _manage(
        tmp_path,
        "check",
        TRAINHUB_ENV="development",
        TRAINHUB_SECRET_KEY="short",
        TRAINHUB_DEBUG="1",
    )
    assert done.returncode == 0, done.stderr


def test_the_external_url_is_read_under_its_former_name_too(tmp_path: Path) -> None:
    show = "from django.conf import settings as s; print(s.EXTERNAL_URL)"  # the last line
    new = _manage(tmp_path, "shell", "-c", show, TRAINHUB_EXTERNAL_URL="https://a.example.com/")
    assert new.stdout.splitlines()[-1] == "https://a.example.com", new.stderr
    old = _manage(tmp_path, "shell", "-c", show, TRAINHUB_PUBLIC_URL="https://b.example.com")
    assert old.stdout.splitlines()[-1] == "https://b.example.com", old.stderr
    both = _manage(
        tmp_path,
        "shell",
        "-c",
        show,
        TRAINHUB_EXTERNAL_URL="https://a.example.com",
        TRAINHUB_PUBLIC_URL="https://b.example.com",
    )
    assert both.stdout.splitlines()[-1] == "https://a.example.com", both.stderr


def test_an_installed_package_serves_the_bundle_from_where_the_image_puts_it(
    tmp_path: Path,
) -> None:
    """The image installs `trainhub` as a package (no checkout around it to find
    frontend/dist in) and copies the bundle to TRAINHUB_FRONTEND_DIST; a production start
    without that variable refuses (staticfiles.W004), one with it starts."""
    site = tmp_path / "site-packages"
    shutil.copytree(
        REPO / "platform" / "trainhub",
        site / "trainhub",
        ignore=shutil.ignore_patterns("__pycache__", "staticfiles"),
    )
    bundle = tmp_path / "opt" / "trainhub" / "frontend" / "dist"
    bundle.mkdir(parents=True)
    check = (
        "import django; django.setup(); from django.core.management import call_command; "
        "call_command('check', '--deploy', '--fail-level', 'WARNING'); print('started')"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TRAINHUB_", "DJANGO_"))},
        "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]),  # REPO: ps_runtime only
        "DJANGO_SETTINGS_MODULE": "trainhub.settings",
        "TRAINHUB_DATA_DIR": str(tmp_path / "data"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "TRAINHUB_ENV": "production",
        "TRAINHUB_SECRET_KEY": GOOD_KEY,
        "TRAINHUB_ALLOWED_HOSTS": "trainhub.example.com",
    }

    def start(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", check],
            env={**env, **extra},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    refused = start()
    assert refused.returncode != 0 and "staticfiles.W004" in refused.stderr, refused.stderr
    started = start(TRAINHUB_FRONTEND_DIST=str(bundle))
    assert started.returncode == 0 and "started" in started.stdout, started.stderr
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    assert "TRAINHUB_FRONTEND_DIST=/opt/trainhub/frontend/dist" in dockerfile
    assert "COPY --from=frontend /src/frontend/dist frontend/dist" in dockerfile
    assert "WORKDIR /opt/trainhub" in dockerfile
    # ...and collects the static files at build time (the test below serves them).
    assert "TRAINHUB_STATIC_MANIFEST=1" in dockerfile
    assert "&& trainhub manage collectstatic --noinput" in dockerfile


SERVE = (
    "import json; from django.test import Client; c = Client(HTTP_HOST='trainhub.example.com');"
    "page = c.get('/login/', secure=True).content.decode();"
    "import re; css = re.search(r'/static/trainhub/app\\.[0-9a-f]{12}\\.css', page).group(0);"
    "got = c.get(css, secure=True);"
    "print(json.dumps({'css': css, 'status': got.status_code,"
    " 'cache': got.headers.get('Cache-Control', '')}))"
)


def test_the_static_files_are_collected_under_hashed_names_and_kept_for_a_year(
    tmp_path: Path,
) -> None:
    """TRAINHUB_STATIC_MANIFEST (the image): collectstatic writes hashed copies, pages link
    them, and WhiteNoise serves them as immutable."""
    env = {
        "TRAINHUB_STATIC_ROOT": str(tmp_path / "static"),
        "TRAINHUB_STATIC_MANIFEST": "1",
    }
    collected = _manage(tmp_path, "collectstatic", "--noinput", **env)
    assert collected.returncode == 0, collected.stderr
    manifest = json.loads((tmp_path / "static" / "staticfiles.json").read_text())["paths"]
    job = manifest["trainhub/pages/job.js"]
    assert job != "trainhub/pages/job.js" and (tmp_path / "static" / job).exists()
    served = _manage(tmp_path, "shell", "-c", SERVE, **env)
    assert served.returncode == 0, served.stderr
    shown = json.loads(served.stdout.strip().splitlines()[-1])
    assert shown["css"] == f"/static/{manifest['trainhub/app.css']}"
    assert shown["status"] == 200 and "immutable" in shown["cache"], shown
