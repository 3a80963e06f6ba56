"""The job spec's `stall:` section: when a running job counts as stalled and what then
happens (`jobs.stalls` holds the typed spec and the detector; docs/design.md §"Stall
detection").

    stall:
      k: 2                      # limit: k times the job's p95 interval between progresses,
      floor_seconds: 20         # at least this
      grace_seconds: 60         # still stalled this much later: on_stall
      on_stall: restart         # restart | stop | notify
      max_phase_seconds: 3600   # evaluation/checkpoint time excluded up to this
"""

from __future__ import annotations

from rest_framework import serializers

from trainhub.strictjson import StrictSerializer

from .stalls import OnStall


class StallSerializer(StrictSerializer):
    k = serializers.FloatField(
        min_value=1,
        max_value=100,
        default=2.0,
        help_text="Stalled after k times the job's p95 interval between progresses.",
    )
    floor_seconds = serializers.FloatField(
        min_value=5,
        max_value=86400,
        default=20.0,
        help_text="The limit is never below this (seconds).",
    )
    grace_seconds = serializers.FloatField(
        min_value=0,
        max_value=86400,
        default=60.0,
        help_text="Seconds a stalled job gets to resume before on_stall happens.",
    )
    on_stall = serializers.ChoiceField(
        choices=[choice.value for choice in OnStall],
        default=OnStall.RESTART.value,
        help_text="restart from the last checkpoint, stop (the job fails as stalled), or "
        "notify only.",
    )
    max_phase_seconds = serializers.FloatField(
        min_value=0,
        max_value=7 * 86400,
        default=3600.0,
        help_text="Evaluation and checkpoint phases are left out of the limit up to this "
        "long since the last progress (a checkpoint that hangs still stalls the job).",
    )
