from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from ps_runtime.agent.labels import LabelError, parse_labels

from .choices import NodeState
from .credentials import revoke_node_credential
from .install import install_command, public_server_url
from .models import EnrollmentToken, Node
from .services import (
    TokenTermsError,
    approve_node,
    check_token_limits,
    check_token_terms,
    create_enrollment_token,
    revoke_enrollment_token,
    set_node_labels,
    set_node_owner,
    set_node_state,
)


def _set_state(state: NodeState, verb: str) -> Any:
    def action(
        modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Node]
    ) -> None:
        for node in queryset:
            set_node_state(node=node, state=state, actor=request.user)
        modeladmin.message_user(request, f"{verb.capitalize()}ed {queryset.count()} node(s).")

    action.__name__ = verb
    return admin.action(description=f"{verb.capitalize()} selected nodes")(action)


class NodeForm(forms.ModelForm):
    """A node's labels written as at install (`zone=eu-1,rack=4`), checked by the same
    parser; the error shows next to the field."""

    labels = forms.CharField(
        required=False,
        widget=forms.TextInput(attrs={"size": 60}),
        help_text="key=value pairs separated by commas, as `--labels` at install "
        "(e.g. zone=eu-1,rack=4); empty: no labels.",
    )

    class Meta:
        model = Node
        fields = ("owner", "labels")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        labels = self.instance.labels or {}
        self.initial["labels"] = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))

    def clean_labels(self) -> dict[str, str]:
        try:
            return parse_labels(self.cleaned_data.get("labels") or "")
        except LabelError as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    """Nodes enroll themselves; administrators change their state with the actions, and
    their owner and labels in the form."""

    form = NodeForm

    list_display = (
        "hostname",
        "address",
        "cpus",
        "memory_mb",
        "gpu_count",
        "owner",
        "state",
        "awaiting_approval",
        "last_seen",
        "credential_expires_at",
        "credential_revoked_at",
    )
    list_filter = ("state", "awaiting_approval", "owner")
    search_fields = ("hostname", "address")
    readonly_fields = [
        "hostname",
        "address",
        "cpus",
        "memory_mb",
        "gpus",
        "isolation",
        "agent_version",
        "state",
        "awaiting_approval",
        "capacity_capped",
        "enrolled_at",
        "last_seen",
        "usage",
        "credential_expires_at",
        "credential_revoked_at",
    ]
    exclude = ("credential_hash", "previous_credential_hash", "previous_credential_until")
    actions = [
        _set_state(NodeState.CORDONED, "cordon"),
        _set_state(NodeState.DRAINING, "drain"),
        _set_state(NodeState.ACTIVE, "uncordon"),
        "approve",
        "revoke_credential",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # nodes join with `trainhub-agent enroll`

    def save_model(self, request: HttpRequest, obj: Node, form: Any, change: bool) -> None:
        # The owner and the labels are the editable fields; the services audit changes.
        set_node_owner(node=obj, owner=obj.owner, actor=request.user)
        set_node_labels(node=obj, labels=obj.labels, actor=request.user)

    @admin.action(description="Approve selected nodes awaiting approval (they get work)")
    def approve(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        waiting = list(queryset.filter(awaiting_approval=True))
        for node in waiting:
            approve_node(node=node, actor=request.user)
        self.message_user(request, f"Approved {len(waiting)} node(s).")

    @admin.action(description="Revoke credential (disconnect; enroll again to return)")
    def revoke_credential(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for node in queryset:
            revoke_node_credential(node=node, actor=request.user)
        self.message_user(
            request,
            f"Revoked the credential of {queryset.count()} node(s); their agents are "
            "disconnected and they get no new work.",
        )


_TOKEN_TERMS = (
    "description",
    "expires_at",
    "max_uses",
    "max_cpus",
    "max_memory_mb",
    "max_gpus",
    "labels",
    "requires_approval",
)


class EnrollmentTokenForm(forms.ModelForm):
    """The service's bounds on a token's terms and limits, shown next to the field at
    fault; labels written as at install (`zone=eu-1,rack=4`)."""

    labels = forms.CharField(
        required=False,
        widget=forms.TextInput(attrs={"size": 60}),
        help_text="Labels its nodes get, over what their agents claim for the same keys: "
        "key=value pairs separated by commas (e.g. zone=eu-1); empty: none.",
    )

    class Meta:
        model = EnrollmentToken
        fields = _TOKEN_TERMS
        help_texts = {
            "expires_at": "Empty: one hour from now. At most seven days away.",
            "max_cpus": "A node declaring more CPUs is refused. Empty: no limit.",
            "max_memory_mb": "A node declaring more memory (MB) is refused. Empty: no limit.",
            "max_gpus": "A node declaring more GPUs is refused (0: CPU-only). Empty: no limit.",
            "requires_approval": "Its nodes start cordoned until an admin approves them.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        labels = self.instance.labels or {}
        self.initial["labels"] = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))

    def clean_labels(self) -> dict[str, str]:
        try:
            return parse_labels(self.cleaned_data.get("labels") or "")
        except LabelError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if self.instance.pk is None and not self.errors:
            try:
                check_token_terms(
                    expires_at=cleaned.get("expires_at"),
                    max_uses=cleaned.get("max_uses") or 1,
                    now=timezone.now(),
                )
                check_token_limits(
                    max_cpus=cleaned.get("max_cpus"),
                    max_memory_mb=cleaned.get("max_memory_mb"),
                    max_gpus=cleaned.get("max_gpus"),
                    labels=cleaned.get("labels"),
                )
            except TokenTermsError as exc:
                self.add_error(exc.field, str(exc))
        return cleaned


@admin.register(EnrollmentToken)
class EnrollmentTokenAdmin(admin.ModelAdmin):
    form = EnrollmentTokenForm
    list_display = (
        "description",
        "created_at",
        "expires_at",
        "uses",
        "max_uses",
        "requires_approval",
        "revoked",
    )
    fields = (*_TOKEN_TERMS, "uses", "revoked", "created_by")
    readonly_fields = ("uses", "revoked", "created_by")
    actions = ["revoke"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is not None:  # a token's terms are fixed once issued; revoke and issue anew
            return self.fields
        return self.readonly_fields

    def save_model(
        self, request: HttpRequest, obj: EnrollmentToken, form: Any, change: bool
    ) -> None:
        if change:
            return
        issued = create_enrollment_token(
            created_by=request.user,  # type: ignore[arg-type]
            description=obj.description,
            expires_at=obj.expires_at,
            max_uses=obj.max_uses or 1,
            max_cpus=obj.max_cpus,
            max_memory_mb=obj.max_memory_mb,
            max_gpus=obj.max_gpus,
            labels=obj.labels,
            requires_approval=obj.requires_approval,
        )
        obj.pk = issued.id
        self.message_user(
            request,
            f"Enrollment token (shown once, copy it now): {issued.secret} — install a node "
            f"with it: {install_command(public_server_url(request), issued.secret)}",
            level=messages.WARNING,
        )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoke instead, so the audit log keeps the token

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[EnrollmentToken]) -> None:
        for token in queryset:
            revoke_enrollment_token(token=token, actor=request.user)
        self.message_user(request, f"Revoked {queryset.count()} token(s).")
