"""Forms of the notification sections (account page, team page): they check what a
browser sends and hand typed values to `trainhub.notifications.services`, which the API
calls too, so a refusal reads the same in both."""

from __future__ import annotations

from django import forms

from trainhub.notifications.choices import NotifyEvent, WebhookFormat
from trainhub.notifications.destinations import MAX_URL_LENGTH

URL_HELP = (
    "http:// or https://, a public address. Each POST is signed: X-TrainHub-Signature is "
    "sha256= and the HMAC-SHA256 of the body with the webhook's secret."
)


class NotificationChoicesForm(forms.Form):
    events = forms.MultipleChoiceField(
        label="Tell me when a job of mine",
        choices=NotifyEvent.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )
    email = forms.BooleanField(label="By e-mail", required=False)


class WebhookForm(forms.Form):
    """A user's own webhook: it follows the user's events."""

    url = forms.CharField(label="URL", max_length=MAX_URL_LENGTH, help_text=URL_HELP)
    format = forms.ChoiceField(label="Format", choices=WebhookFormat.choices)


class TeamWebhookForm(WebhookForm):
    """A team's webhook: every job of the team, for the events it names."""

    events = forms.MultipleChoiceField(
        label="Events",
        choices=NotifyEvent.choices,
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Choose at least one event for a team's webhook."},
    )
