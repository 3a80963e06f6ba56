"""A Django admin for rows that only services write: shown, never added, changed or deleted."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class ReadOnlyModelAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
