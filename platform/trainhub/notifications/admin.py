"""Notifications in the Django admin: read-only (users and team admins change them on
their pages and through the API); a webhook's secret is never shown here."""

from __future__ import annotations

from django.contrib import admin

from trainhub.readonly_admin import ReadOnlyModelAdmin

from .models import Delivery, Subscription, Webhook


@admin.register(Subscription)
class SubscriptionAdmin(ReadOnlyModelAdmin):
    list_display = ("user", "events", "email", "updated_at")


@admin.register(Webhook)
class WebhookAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "user", "team", "format", "events", "created_at")
    exclude = ("secret", "url")  # a URL's path may be a token (Slack's are)
    list_select_related = ("user", "team")


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyModelAdmin):
    list_display = (
        "id",
        "event",
        "channel",
        "status",
        "attempts",
        "last_status_code",
        "next_attempt_at",
    )
    list_filter = ("status", "event", "channel")
    exclude = ("payload",)
