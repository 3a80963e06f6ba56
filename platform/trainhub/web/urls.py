"""Page paths are a contract (docs/design.md §2): tests, bookmarks and the README use them."""

from django.contrib.auth import views as auth_views
from django.urls import path

from .views import account, dashboard, jobs, nodes, teams

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", dashboard.dashboard, name="web-dashboard"),
    path("jobs/", jobs.job_list, name="web-job-list"),
    path("jobs/new/", jobs.job_new, name="web-job-new"),
    path("jobs/compare/", jobs.job_compare, name="web-job-compare"),
    path("jobs/<int:job_id>/", jobs.job_detail, name="web-job-detail"),
    path("nodes/", nodes.node_list, name="web-node-list"),
    path("nodes/<int:node_id>/", nodes.node_detail, name="web-node-detail"),
    path("teams/", teams.team_list, name="web-team-list"),
    path("teams/<slug:slug>/", teams.team_detail, name="web-team-detail"),
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
    path("account/", account.account, name="web-account"),
    path("account/tokens/", account.token_create, name="web-account-token-create"),
    path("account/tokens/<str:key>/revoke/", account.token_revoke, name="web-account-token-revoke"),
]
