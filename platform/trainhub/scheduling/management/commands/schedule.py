"""`trainhub manage schedule`: run one scheduling cycle now, or only show what it would do."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from trainhub.scheduling.policy import POLICIES
from trainhub.scheduling.services import run_cycle


class Command(BaseCommand):
    help = (
        "Run one scheduling cycle. With --observe it changes nothing and prints what the "
        "policy would do on the live cluster (starts, resizes, preemptions, pending reasons)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--observe", action="store_true", help="decide, print, apply nothing")
        parser.add_argument(
            "--policy",
            choices=sorted(POLICIES),
            help="policy to run (default: the TRAINHUB_SCHEDULER_POLICY setting)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        result = run_cycle(
            now=timezone.now(),
            policy_name=options["policy"],
            observe_only=True if options["observe"] else None,
        )
        if not result.ran:
            raise CommandError("another scheduling cycle is running; try again in a moment")
        verb = "would" if result.observe_only else "did"
        for line in result.lines:
            self.stdout.write(f"{verb} {line}" if not line.startswith("job ") else line)
        if not result.lines:
            self.stdout.write("nothing to do: no pending jobs and no resizes")
