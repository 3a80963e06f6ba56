"""Page paths are a contract (docs/design.md §2): tests, bookmarks and the README use them."""

from django.contrib.auth import views as auth_views
from django.urls import path

from .signin import throttled_sign_in
from .views import (
    account,
    compare,
    dashboard,
    job_actions,
    job_detail,
    job_list,
    nodes,
    notifications,
    submit,
    team_admin,
    teams,
    users,
    whatif,
)

urlpatterns = [
    path("login/", throttled_sign_in(auth_views.LoginView.as_view()), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", dashboard.dashboard, name="web-dashboard"),
    path("jobs/", job_list.job_list, name="web-job-list"),
    path("jobs/new/", submit.job_new, name="web-job-new"),
    path("jobs/new/preview/", submit.job_new_preview, name="web-job-new-preview"),
    path("jobs/new/convert/", submit.job_new_convert, name="web-job-new-convert"),
    path("jobs/new/code/", submit.job_new_code, name="web-job-new-code"),
    path("jobs/compare/", compare.job_compare, name="web-job-compare"),
    path("jobs/<int:job_id>/", job_detail.job_detail, name="web-job-detail"),
    path("jobs/<int:job_id>/tasks/", job_detail.job_tasks, name="web-job-tasks"),
    path("jobs/<int:job_id>/queue/", job_detail.job_queue, name="web-job-queue"),
    path("jobs/<int:job_id>/cancel/", job_actions.job_cancel, name="web-job-cancel"),
    path("jobs/<int:job_id>/scale/", job_actions.job_scale, name="web-job-scale"),
    path("nodes/", nodes.node_list, name="web-node-list"),
    path("nodes/add/", nodes.node_add, name="web-node-add"),
    path("nodes/<int:node_id>/", nodes.node_detail, name="web-node-detail"),
    path("nodes/<int:node_id>/cordon/", nodes.node_cordon, name="web-node-cordon"),
    path("nodes/<int:node_id>/drain/", nodes.node_drain, name="web-node-drain"),
    path("nodes/<int:node_id>/uncordon/", nodes.node_uncordon, name="web-node-uncordon"),
    path("teams/", team_admin.teams_page, name="web-team-list"),
    path("teams/<slug:slug>/", teams.team_detail, name="web-team-detail"),
    path("teams/<slug:slug>/rename/", team_admin.team_rename, name="web-team-rename"),
    path("teams/<slug:slug>/active/", team_admin.team_active, name="web-team-active"),
    path("teams/<slug:slug>/members/", teams.member_add, name="web-team-member-add"),
    path(
        "teams/<slug:slug>/members/<str:username>/role/",
        teams.member_role,
        name="web-team-member-role",
    ),
    path(
        "teams/<slug:slug>/members/<str:username>/remove/",
        teams.member_remove,
        name="web-team-member-remove",
    ),
    path("teams/<slug:slug>/quota/", teams.team_quota, name="web-team-quota"),
    path(
        "teams/<slug:slug>/webhooks/",
        notifications.team_webhook_create,
        name="web-team-webhook-create",
    ),
    path(
        "teams/<slug:slug>/webhooks/<int:webhook_id>/delete/",
        notifications.team_webhook_delete,
        name="web-team-webhook-delete",
    ),
    path("users/", users.user_list, name="web-user-list"),
    path("users/<str:username>/", users.user_detail, name="web-user-detail"),
    path("users/<str:username>/active/", users.user_active, name="web-user-active"),
    path("whatif/", whatif.whatif_page, name="web-whatif"),
    path("account/", account.account, name="web-account"),
    path("account/tokens/", account.token_create, name="web-account-token-create"),
    path("account/tokens/<str:key>/revoke/", account.token_revoke, name="web-account-token-revoke"),
    path(
        "account/notifications/",
        notifications.notification_choices,
        name="web-account-notifications",
    ),
    path("account/webhooks/", notifications.own_webhook_create, name="web-account-webhook-create"),
    path(
        "account/webhooks/<int:webhook_id>/delete/",
        notifications.own_webhook_delete,
        name="web-account-webhook-delete",
    ),
]
