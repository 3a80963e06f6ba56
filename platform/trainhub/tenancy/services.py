"""State changes for teams, memberships and quotas: every write goes through here.

Each change is recorded in the audit log; quota changes publish `QuotaChanged`, on which
the scheduler queues a cycle; a removal from a team or a changed platform role publishes
`AccessChanged`, on which the user's open live feeds check their access again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.forms.models import model_to_dict

from trainhub.audit.services import Actor, record_change
from trainhub.events import AccessChanged, QuotaChanged, publish

from .accounts import email_taken
from .choices import Priority, Role
from .models import Membership, PriorityCap, Quota, Team
from .resources import LimitResources, Resources, describe


class TenancyError(Exception):
    """A change that would leave a team inconsistent; the message says why."""


@dataclass(frozen=True)
class QuotaValues:
    """Everything an administrator sets on a team's quota."""

    nominal: Resources
    borrowing_limit: LimitResources = field(default_factory=LimitResources)
    lending_limit: LimitResources = field(default_factory=LimitResources)

    def fields(self) -> dict[str, Any]:
        values: dict[str, Any] = asdict(self.nominal)
        for prefix, limit in (
            ("borrowing_limit", self.borrowing_limit),
            ("lending_limit", self.lending_limit),
        ):
            values.update({f"{prefix}_{k}": v for k, v in asdict(limit).items()})
        return values


def _quota_fields(quota: Quota) -> dict[str, Any]:
    return model_to_dict(quota, exclude=["id", "team"])


def _caps_fields(team: Team) -> dict[str, Any]:
    return {
        cap.priority: {"cpu": cap.cpu, "memory_mb": cap.memory_mb, "gpu": cap.gpu}
        for cap in PriorityCap.objects.filter(team=team)
    }


@transaction.atomic
def create_team(
    *,
    slug: str,
    name: str,
    cpu: float = 0,
    memory_mb: int = 0,
    gpu: int = 0,
    actor: Actor = None,
) -> Team:
    if Team.objects.filter(slug=slug).exists():
        raise TenancyError(f"A team '{slug}' already exists.")
    team = Team.objects.create(slug=slug, name=name)
    quota = Quota.objects.create(team=team, cpu=cpu, memory_mb=memory_mb, gpu=gpu)
    record_change(
        actor=actor,
        action="team.create",
        target=team,
        before=None,
        after={"slug": slug, "name": name, "quota": _quota_fields(quota)},
    )
    publish(QuotaChanged(team_id=team.pk))
    return team


@transaction.atomic
def rename_team(*, team: Team, name: str, actor: Actor = None) -> Team:
    before = {"name": team.name}
    Team.objects.filter(pk=team.pk).update(name=name)
    team.name = name
    record_change(
        actor=actor, action="team.update", target=team, before=before, after={"name": name}
    )
    return team


@transaction.atomic
def set_team_active(*, team: Team, active: bool, active_jobs: int = 0, actor: Actor = None) -> Team:
    """Deactivate a team: it takes no new jobs and its nominal quota goes to zero (the
    audit log keeps what it was), so that capacity is unassigned; or reactivate it (its
    quota stays zero until set again). Members, jobs and history stay.

    Raises:
        TenancyError: deactivating a team that has active jobs (`active_jobs`, which the
            caller counts: tenancy does not read jobs).
    """
    if not active and active_jobs:
        raise TenancyError(
            f"The team has {active_jobs} active job{'s' if active_jobs > 1 else ''}; "
            "cancel them or let them end first."
        )
    locked = Team.objects.select_for_update().get(pk=team.pk)
    team.is_active = active
    if locked.is_active == active:
        return team  # repeating it is a no-op
    Team.objects.filter(pk=team.pk).update(is_active=active)
    record_change(
        actor=actor,
        action="team.update",
        target=team,
        before={"is_active": locked.is_active},
        after={"is_active": active},
    )
    if not active:
        quota, _ = Quota.objects.get_or_create(team=team)
        values = QuotaValues(Resources(), quota.borrowing_limit, quota.lending_limit)
        set_quota(team=team, values=values, actor=actor)
    return team


@transaction.atomic
def add_member(
    *, team: Team, user: User, role: Role = Role.MEMBER, actor: Actor = None
) -> Membership:
    """Add the user to the team with `role`, or change the role of an existing member.

    Raises:
        TenancyError: the change would leave the team without an admin.
    """
    existing = Membership.objects.select_for_update().filter(team=team, user=user).first()
    if existing is not None and existing.role == Role.ADMIN and role != Role.ADMIN:
        _keep_an_admin(existing)
    before = {"user": user.username, "role": existing.role} if existing else None
    membership, _ = Membership.objects.update_or_create(
        team=team, user=user, defaults={"role": role}
    )
    record_change(
        actor=actor,
        action="member.update" if existing else "member.add",
        target=membership,
        before=before,
        after={"user": user.username, "role": str(role)},
    )
    return membership


def _keep_an_admin(admin: Membership) -> None:
    """Refuse to take away the team's last admin (removed or given another role)."""
    others = Membership.objects.select_for_update().filter(team_id=admin.team_id, role=Role.ADMIN)
    if not others.exclude(pk=admin.pk).exists():
        raise TenancyError("This is the team's last admin; make someone else admin first.")


@transaction.atomic
def remove_member(*, membership: Membership, actor: Actor = None) -> None:
    locked = Membership.objects.select_for_update().filter(pk=membership.pk).first()
    if locked is None:
        return  # already gone: repeating a removal is a no-op
    if locked.role == Role.ADMIN:
        _keep_an_admin(locked)
    record_change(
        actor=actor,
        action="member.remove",
        target=locked,
        before={"user": locked.user.username, "role": locked.role},
        after=None,
    )
    locked.delete()  # `access_lost` publishes AccessChanged


@transaction.atomic
def set_quota(
    *,
    team: Team,
    values: QuotaValues,
    actor: Actor = None,
    held_by_production: Resources | None = None,
) -> Quota:
    """Set the team's quota under a row lock; the scheduler applies it in its next cycle.

    Raises:
        TenancyError: the nominal quota would be below what the team's production jobs
            hold (`held_by_production`, which the caller reads from the jobs it runs).
    """
    quota, _ = Quota.objects.select_for_update().get_or_create(team=team)
    if held_by_production is not None:
        below = held_by_production.exceeding(values.nominal)
        if below:
            raise TenancyError(
                f"The team's production jobs hold {describe(held_by_production, below)}; "
                "the quota cannot be set below that. Stop or shrink them first."
            )
    before = _quota_fields(quota)
    for name, value in values.fields().items():
        setattr(quota, name, value)
    quota.save()
    after = _quota_fields(quota)
    if record_change(actor=actor, action="quota.update", target=quota, before=before, after=after):
        publish(QuotaChanged(team_id=team.pk))
    return quota


@transaction.atomic
def set_priority_caps(*, team: Team, caps: dict[str, LimitResources], actor: Actor = None) -> None:
    """Replace the team's per-priority caps; a priority left out has no cap."""
    unknown = sorted(set(caps) - set(Priority.values))
    if unknown:
        raise TenancyError(f"Unknown priority {', '.join(unknown)}; use one of {Priority.values}.")
    Quota.objects.select_for_update().filter(team=team).first()  # serialize with submissions
    before = _caps_fields(team)
    PriorityCap.objects.filter(team=team).exclude(priority__in=list(caps)).delete()
    for priority, limit in caps.items():
        PriorityCap.objects.update_or_create(
            team=team,
            priority=priority,
            defaults={"cpu": limit.cpu, "memory_mb": limit.memory_mb, "gpu": limit.gpu},
        )
    after = _caps_fields(team)
    quota = Quota.objects.get(team=team)
    if record_change(
        actor=actor, action="priority_caps.update", target=quota, before=before, after=after
    ):
        publish(QuotaChanged(team_id=team.pk))


@transaction.atomic
def create_user(
    *,
    username: str,
    password: str,
    email: str = "",
    first_name: str = "",
    last_name: str = "",
    is_platform_admin: bool = False,
    actor: Actor = None,
) -> User:
    """Create a user; platform admins are superusers (they also get the admin site).

    Raises:
        TenancyError: the username, or a non-blank e-mail, is another user's already.
    """
    if User.objects.filter(username=username).exists():
        raise TenancyError(f"A user '{username}' already exists.")
    if email_taken(email):
        raise TenancyError(f"Another user has the e-mail '{email}'.")
    user = User.objects.create_user(
        username,
        email,
        password,
        is_superuser=is_platform_admin,
        is_staff=is_platform_admin,
        first_name=first_name,
        last_name=last_name,
    )
    record_change(
        actor=actor,
        action="user.create",
        target=user,
        before=None,
        after={
            "username": username,
            "email": email,
            "first_name": first_name,
            "last_name": last_name,
            "is_platform_admin": is_platform_admin,
        },
    )
    return user


# What a platform admin edits of a user besides their role; changes are audited.
USER_PROFILE_FIELDS = ("email", "first_name", "last_name")


@transaction.atomic
def update_user(
    *, user: User, email: str, first_name: str, last_name: str, actor: Actor = None
) -> User:
    """Change a user's e-mail and name (an e-mail another user has is refused: members
    are added by it).

    Raises:
        TenancyError: another user has the e-mail.
    """
    if email_taken(email, other_than=user):
        raise TenancyError(f"Another user has the e-mail '{email}'.")
    before = {name: getattr(user, name) for name in USER_PROFILE_FIELDS}
    after = {"email": email, "first_name": first_name, "last_name": last_name}
    User.objects.filter(pk=user.pk).update(**after)
    for name, value in after.items():
        setattr(user, name, value)
    record_change(actor=actor, action="user.update", target=user, before=before, after=after)
    return user


def set_user_active(*, user: User, active: bool, actor: Actor = None) -> User:
    """Deactivate a user (they can no longer sign in; their tokens stop working and their
    live feeds close) or reactivate them. Their memberships and jobs stay.

    Raises:
        TenancyError: a user deactivating themselves (nobody could undo it from there).
    """
    if not active and actor is not None and getattr(actor, "pk", None) == user.pk:
        raise TenancyError("You cannot deactivate yourself; another platform admin can.")
    user.is_active = active
    return save_user(user=user, actor=actor)


def access_lost(sender: Any, instance: Membership | User, **kwargs: Any) -> None:
    """`post_delete` of a membership or a user, however deleted (here, the admin, a
    cascade): the user's open live feeds check their access again."""
    user_id = instance.user_id if isinstance(instance, Membership) else instance.pk
    publish(AccessChanged(user_id=user_id))


# The fields of a user that make up its platform role; their changes are audited.
USER_ROLE_FIELDS = ("is_active", "is_staff", "is_superuser")


@transaction.atomic
def save_user(*, user: User, actor: Actor = None) -> User:
    """Save a user edited in the admin (new or changed); role changes go to the audit log."""
    created = user.pk is None
    before = (
        None
        if created
        else dict(User.objects.filter(pk=user.pk).values(*USER_ROLE_FIELDS).first() or {})
    )
    user.save()
    after = {name: getattr(user, name) for name in USER_ROLE_FIELDS}
    record_change(
        actor=actor,
        action="user.create" if created else "user.roles",
        target=user,
        before=before,
        after=after,
    )
    if not created and before != after:
        publish(AccessChanged(user_id=user.pk))
    return user


@transaction.atomic
def ensure_team(*, slug: str, name: str, cpu: float, memory_mb: int, gpu: int) -> Team:
    """Create the team with this quota, or set the nominal quota of the existing one."""
    team = Team.objects.filter(slug=slug).first()
    if team is None:
        return create_team(slug=slug, name=name, cpu=cpu, memory_mb=memory_mb, gpu=gpu)
    quota, _ = Quota.objects.get_or_create(team=team)
    set_quota(
        team=team,
        values=QuotaValues(
            nominal=Resources(cpu, memory_mb, gpu),
            borrowing_limit=quota.borrowing_limit,
            lending_limit=quota.lending_limit,
        ),
    )
    return team
