"""The job spec's `retry:` section: which causes of a task's end restart the job without
spending `max_restarts`, how many such restarts at most, and how long restarts wait.

    retry:
      on: [node_lost, preempted, transient_network, ps_lost, stalled]   # the default
      max: 10
      backoff_seconds: 10          # the first restart waits this long, each next one twice
      max_backoff_seconds: 300     # as long, up to this

`jobs.retries` decides with it; docs/design.md §"Retries" says how.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from trainhub.strictjson import StrictSerializer

from .jobspec import DEFAULT_RETRY_ON, RETRY_CAUSES


class RetrySerializer(StrictSerializer):
    on = serializers.ListField(
        child=serializers.ChoiceField(choices=RETRY_CAUSES),
        max_length=len(RETRY_CAUSES),
        default=list(DEFAULT_RETRY_ON),
        help_text="Causes of a task's end whose restarts spend retry.max, not max_restarts.",
    )
    max = serializers.IntegerField(
        min_value=0, max_value=1000, default=10, help_text="Such restarts at most."
    )
    backoff_seconds = serializers.FloatField(
        min_value=0,
        max_value=3600,
        default=10.0,
        help_text="The first restart waits this long, each next one twice as long.",
    )
    max_backoff_seconds = serializers.FloatField(
        min_value=0,
        max_value=86400,
        default=300.0,
        help_text="The longest wait before a restart (at least backoff_seconds).",
    )

    def validate_on(self, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))  # once each, in the order given

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("max_backoff_seconds", 300.0) < attrs.get("backoff_seconds", 10.0):
            raise serializers.ValidationError(
                {"max_backoff_seconds": ["Must be at least backoff_seconds."]}
            )
        return attrs
