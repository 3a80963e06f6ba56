from django.contrib import admin

from .models import Membership, Quota, Team


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


class QuotaInline(admin.StackedInline):
    model = Quota
    can_delete = False


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    inlines = [QuotaInline, MembershipInline]
