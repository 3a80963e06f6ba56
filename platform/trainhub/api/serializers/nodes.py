"""Nodes and enrollment tokens."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from ps_runtime.agent.labels import KEY_PATTERN, MAX_LABELS, VALUE_PATTERN, LabelError, check_labels
from ps_runtime.version import known_runtime_version
from trainhub.nodes.choices import NodeState
from trainhub.nodes.models import EnrollmentToken, Node
from trainhub.nodes.selectors import NodeStatus, agent_outdated, agent_version, node_status
from trainhub.nodes.services import (
    TOKEN_MAX_CPUS,
    TOKEN_MAX_GPUS,
    TOKEN_MAX_MEMORY_MB,
    TOKEN_MAX_USES,
    TokenTermsError,
    check_token_limits,
    check_token_terms,
)
from trainhub.strictjson import JsonTypedSerializer


class NodeGpuSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    model = serializers.CharField(required=False)
    memory_mb = serializers.IntegerField(required=False)
    uuid = serializers.CharField(required=False)


class NodeSerializer(serializers.ModelSerializer):
    gpus = NodeGpuSerializer(many=True, read_only=True)
    usage = serializers.DictField(read_only=True)
    labels = serializers.DictField(child=serializers.CharField(), read_only=True)
    alive = serializers.SerializerMethodField()
    status = serializers.SerializerMethodField(
        help_text="What the web shows: ready (active and alive), cordoned, draining or lost "
        "(not heard from in time, whatever its `state`)."
    )
    quarantine_reason = serializers.CharField(
        read_only=True,
        help_text="Why the node was cordoned on its own (tasks kept failing at start "
        "there); empty otherwise.",
    )
    active_tasks = serializers.IntegerField(read_only=True, help_text="Tasks running there now.")
    drained = serializers.SerializerMethodField(
        help_text="Draining and nothing runs there any more: safe to take out of service."
    )
    credential_expires_at = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="When the node's credential expires; its agent renews it at two thirds.",
    )
    credential_revoked_at = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="When an admin revoked the node's credential (null: not revoked).",
    )
    awaiting_approval = serializers.BooleanField(
        read_only=True,
        help_text="Enrolled with a token that requires approval and not approved yet: "
        "cordoned until a platform admin approves it (`POST .../approve/`).",
    )
    capacity_capped = serializers.DictField(
        read_only=True,
        help_text="Empty, or why the node offers less than it declared at enrollment: "
        '{"gpus": {"declared": [...], "reported": [indices], "since": time}} when its '
        "heartbeats report fewer GPUs (`gpus` holds those offered); likewise "
        '"cpus" and "memory_mb" when they report fewer CPUs or less memory '
        "(`cpus` and `memory_mb` hold what is offered).",
    )

    owner: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="slug",
        read_only=True,
        allow_null=True,
        help_text="Team whose jobs prefer this node (set in the admin), or null.",
    )
    agent_version = serializers.SerializerMethodField(
        help_text="The trainhub-runtime version the node's agent reported last (null: none "
        "reported, an agent older than the field)."
    )
    outdated = serializers.SerializerMethodField(
        help_text="The agent runs another version than this server (false while unknown): "
        "re-run the install command on the node; the new version runs from the agent's next "
        "restart."
    )

    class Meta:
        model = Node
        fields = [
            "id",
            "hostname",
            "address",
            "cpus",
            "memory_mb",
            "gpus",
            "owner",
            "labels",
            "isolation",
            "agent_version",
            "outdated",
            "state",
            "status",
            "quarantine_reason",
            "alive",
            "active_tasks",
            "drained",
            "enrolled_at",
            "last_seen",
            "usage",
            "credential_expires_at",
            "credential_revoked_at",
            "awaiting_approval",
            "capacity_capped",
        ]
        read_only_fields = fields

    def get_alive(self, node: Node) -> bool:
        return node.is_alive(timezone.now())

    @extend_schema_field(serializers.ChoiceField(choices=[s.value for s in NodeStatus]))
    def get_status(self, node: Node) -> str:
        return node_status(node, timezone.now()).value

    def get_drained(self, node: Node) -> bool:
        return node.state == NodeState.DRAINING and not getattr(node, "active_tasks", 0)

    def get_agent_version(self, node: Node) -> str | None:
        return agent_version(node)

    def get_outdated(self, node: Node) -> bool:
        return agent_outdated(node, self._server_version)

    @cached_property
    def _server_version(self) -> str | None:
        return known_runtime_version()  # read once per response, not once per node


class LabelValueField(serializers.CharField):
    """A label's value: a string as sent (a number is refused, not turned into one)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_blank=True, trim_whitespace=False, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("must be a string.")
        return data


@extend_schema_field(
    {
        "type": "object",
        "maxProperties": MAX_LABELS,
        "propertyNames": {"pattern": f"^{KEY_PATTERN}$"},
        "additionalProperties": {"type": "string", "pattern": f"^{VALUE_PATTERN}$"},
    }
)
class LabelsField(serializers.DictField):
    """Node labels, checked by `ps_runtime.agent.labels` (the schema states its rules)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=LabelValueField(), **kwargs)


class NodeLabelsSerializer(JsonTypedSerializer):
    """`PATCH /api/v1/nodes/{id}/`: the node's labels, replaced as a whole."""

    refuses_unknown_fields = True  # the schema says so: `additionalProperties: false`

    labels = LabelsField(
        required=False,
        help_text="All the node's labels, e.g. zone: eu-1 ({} removes them; left out, they "
        "stay as they are). Names and values as for `--labels` at install.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError(
                {name: ["cannot be changed here; only labels can."] for name in unknown}
            )
        return attrs

    def validate_labels(self, labels: dict[str, str]) -> dict[str, str]:
        try:
            return check_labels(labels)
        except LabelError as exc:
            raise serializers.ValidationError(str(exc)) from None


class EnrollmentTokenSerializer(serializers.ModelSerializer):
    created_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    labels = serializers.DictField(
        child=serializers.CharField(),
        read_only=True,
        help_text="Labels its nodes get, over what their agents claim for the same keys.",
    )

    class Meta:
        model = EnrollmentToken
        fields = [
            "id",
            "description",
            "created_by",
            "created_at",
            "expires_at",
            "max_uses",
            "uses",
            "revoked",
            "max_cpus",
            "max_memory_mb",
            "max_gpus",
            "labels",
            "requires_approval",
        ]
        read_only_fields = fields


# Read from requests only: its schema component is "EnrollmentTokenRequest", not "…RequestRequest".
@extend_schema_serializer(component_name="EnrollmentToken")
class EnrollmentTokenRequestSerializer(JsonTypedSerializer):
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    expires_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="When the token stops working: in the future, at most 7 days away "
        "(default: one hour from now).",
    )
    max_uses = serializers.IntegerField(
        min_value=1,
        max_value=TOKEN_MAX_USES,
        required=False,
        default=1,
        help_text="How many nodes it may enroll (default 1).",
    )
    max_cpus = serializers.FloatField(
        min_value=0.1,
        max_value=TOKEN_MAX_CPUS,
        required=False,
        allow_null=True,
        help_text="A node enrolled with it may declare at most this many CPUs; one that "
        "declares more is refused (default null: no limit).",
    )
    max_memory_mb = serializers.IntegerField(
        min_value=1,
        max_value=TOKEN_MAX_MEMORY_MB,
        required=False,
        allow_null=True,
        help_text="At most this much memory (MB) per node; more is refused (null: no limit).",
    )
    max_gpus = serializers.IntegerField(
        min_value=0,
        max_value=TOKEN_MAX_GPUS,
        required=False,
        allow_null=True,
        help_text="At most this many GPUs per node (0: CPU-only nodes); more is refused "
        "(null: no limit).",
    )
    labels = LabelsField(
        required=False,
        help_text="Labels its nodes get, over what their agents claim for the same keys "
        "(e.g. zone: eu-1). Names and values as for `--labels` at install.",
    )
    requires_approval = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Its nodes start cordoned, awaiting a platform admin's approval "
        "(`POST /api/v1/nodes/{id}/approve/`).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # The service's own checks, so the API, the admin and the service agree.
        try:
            attrs["expires_at"] = check_token_terms(
                expires_at=attrs.get("expires_at"),
                max_uses=attrs.get("max_uses", 1),
                now=timezone.now(),
            )
            attrs["labels"] = check_token_limits(
                max_cpus=attrs.get("max_cpus"),
                max_memory_mb=attrs.get("max_memory_mb"),
                max_gpus=attrs.get("max_gpus"),
                labels=attrs.get("labels"),
            )
        except TokenTermsError as exc:
            raise serializers.ValidationError({exc.field: [str(exc)]}) from exc
        return attrs


class IssuedEnrollmentTokenSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    token = serializers.CharField(help_text="The secret; shown only this once.")
    expires_at = serializers.DateTimeField()
    max_uses = serializers.IntegerField()
    install_command = serializers.CharField(
        help_text="The line to run on a new node as root: it saves the token to "
        "`~/trainhub-enroll-token` (mode 0600, with a shell builtin, so no process list "
        "shows it), then installs the agent and enrolls it with `--token-file`. Options "
        "such as `--prefix DIR --no-service` go at its end. For an http:// server it "
        "passes `--insecure`: the token then crosses the network unencrypted (trials only)."
    )
