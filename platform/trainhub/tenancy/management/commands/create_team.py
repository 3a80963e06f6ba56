"""`trainhub manage create_team SLUG`: create a team (or set its quota) and add members."""

from __future__ import annotations

import argparse
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from trainhub.tenancy.choices import Role
from trainhub.tenancy.services import add_member, ensure_team


class Command(BaseCommand):
    help = "Create a team with a quota (or update the quota of an existing one)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default="")
        parser.add_argument("--cpu", type=float, required=True)
        parser.add_argument("--memory-mb", type=int, required=True)
        parser.add_argument("--gpu", type=int, default=0)
        parser.add_argument(
            "--admin",
            action="append",
            default=[],
            metavar="USERNAME",
            help="make this user a team admin (repeatable)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model().objects
        missing = [u for u in options["admin"] if not users.filter(username=u).exists()]
        if missing:
            raise CommandError(f"No such user: {', '.join(missing)}. Create it first.")
        team = ensure_team(
            slug=options["slug"],
            name=options["name"] or options["slug"],
            cpu=options["cpu"],
            memory_mb=options["memory_mb"],
            gpu=options["gpu"],
        )
        for username in options["admin"]:
            add_member(team=team, user=users.get(username=username), role=Role.ADMIN)
        self.stdout.write(
            f"team {team.slug}: cpu={options['cpu']} "
            f"memory_mb={options['memory_mb']} gpu={options['gpu']}"
        )
