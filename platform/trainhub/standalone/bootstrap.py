"""First-run setup of a standalone installation: schema, admin user, default team."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import transaction

from trainhub.nodes.services import create_enrollment_token
from trainhub.tenancy.choices import Role
from trainhub.tenancy.services import add_member, ensure_team


@dataclass(frozen=True)
class Bootstrapped:
    admin_password: str | None  # set only when it was generated just now, to print it once


def machine_resources() -> tuple[float, int]:
    cpus = float(len(os.sched_getaffinity(0)))
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return cpus, pages // (1024 * 1024)


def bootstrap(*, admin_password: str | None) -> Bootstrapped:
    """Migrate, then make sure the admin user and the `default` team exist."""
    admin_password = admin_password or None  # an empty variable means "not set"
    call_command("migrate", interactive=False, verbosity=0)
    cpus, memory_mb = machine_resources()
    with transaction.atomic():
        user_model = get_user_model()
        admin = user_model.objects.filter(username="admin").first()
        created_password = None
        if admin is None:
            created_password = admin_password or secrets.token_urlsafe(12)
            admin = user_model.objects.create_superuser("admin", "", created_password)
        elif admin_password:
            admin.set_password(admin_password)
            admin.save(update_fields=["password"])
        team = ensure_team(
            slug="default", name="Default team", cpu=cpus, memory_mb=memory_mb, gpu=0
        )
        add_member(team=team, user=admin, role=Role.ADMIN)
    shown = created_password if admin_password is None else None
    return Bootstrapped(admin_password=shown)


def local_enrollment_token() -> str:
    """A single-use token for the standalone installation's own agent."""
    admin = get_user_model().objects.get(username="admin")
    return create_enrollment_token(
        created_by=admin, description="standalone local agent", max_uses=1
    ).secret
