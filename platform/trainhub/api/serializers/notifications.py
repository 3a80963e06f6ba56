"""A user's notification choices, webhooks and their deliveries."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from trainhub.notifications.choices import NotifyEvent, WebhookFormat
from trainhub.notifications.destinations import MAX_URL_LENGTH
from trainhub.notifications.models import Delivery, Webhook
from trainhub.strictjson import StrictSerializer


def events_field(*, required: bool, allow_null: bool, help_text: str) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.ChoiceField(choices=NotifyEvent.choices),
        required=required,
        allow_null=allow_null,
        max_length=2 * len(NotifyEvent),
        help_text=help_text,
    )


class NotificationChoicesSerializer(StrictSerializer):
    """What you are told about your own jobs, and whether by e-mail; your own webhooks
    get the same events unless one says otherwise."""

    events = events_field(
        required=True,
        allow_null=False,
        help_text="Events of your jobs to be told about; experiment.finished is not offered yet.",
    )
    email = serializers.BooleanField(help_text="Send them to your account's e-mail address.")
    email_address = serializers.CharField(
        read_only=True, help_text="Your account's address; empty: no e-mail can go."
    )
    email_available = serializers.BooleanField(
        read_only=True, help_text="Whether this server sends e-mail at all."
    )


class WebhookSerializer(serializers.ModelSerializer):
    team: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="slug",
        read_only=True,
        allow_null=True,
        help_text="The team whose jobs it hears (team admins manage it); null: your own.",
    )
    events = events_field(
        required=False,
        allow_null=True,
        help_text="null on your own webhook: the events you chose (users/me/notifications/).",
    )

    class Meta:
        model = Webhook
        fields = ["id", "url", "format", "events", "team", "created_at"]


class CreatedWebhookSerializer(WebhookSerializer):
    secret = serializers.CharField(
        help_text="The HMAC-SHA256 key of X-TrainHub-Signature; shown only this once."
    )

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]


def _url_field(*, required: bool) -> serializers.CharField:
    return serializers.CharField(
        required=required,
        max_length=MAX_URL_LENGTH,
        help_text="http:// or https:// and a public address (private, loopback and "
        "link-local ones are refused unless the operator allows them); no credentials.",
    )


# Read from requests only: its schema component is "WebhookRequest".
@extend_schema_serializer(component_name="Webhook")
class WebhookRequestSerializer(StrictSerializer):
    url = _url_field(required=True)
    format = serializers.ChoiceField(
        choices=WebhookFormat.choices,
        default=WebhookFormat.JSON,
        help_text='json: the event, signed; slack: {"text": …} for a Slack-compatible '
        "incoming webhook (signed too).",
    )
    events = events_field(
        required=False,
        allow_null=True,
        help_text="A team's webhook needs at least one; absent or null on your own: the "
        "events you chose.",
    )
    team = serializers.SlugField(
        required=False,
        allow_null=True,
        max_length=63,
        help_text="A team you administer: the webhook hears every job of the team.",
    )


@extend_schema_serializer(component_name="WebhookChange")
class WebhookChangeSerializer(StrictSerializer):
    url = _url_field(required=False)
    format = serializers.ChoiceField(choices=WebhookFormat.choices, required=False)
    events = events_field(required=False, allow_null=True, help_text="As when created.")


class DeliverySerializer(serializers.ModelSerializer):
    job: serializers.PrimaryKeyRelatedField = serializers.PrimaryKeyRelatedField(
        read_only=True, allow_null=True
    )

    class Meta:
        model = Delivery
        fields = [
            "id",
            "event",
            "job",
            "channel",
            "status",
            "attempts",
            "last_status_code",
            "last_error",
            "next_attempt_at",
            "last_attempt_at",
            "delivered_at",
            "created_at",
        ]
        read_only_fields = fields
