"""Page paths are a contract (docs/design.md §2): tests, bookmarks and the README use them."""

from django.contrib.auth import views as auth_views
from django.urls import path

from .views import account, dashboard, job_list, jobs, nodes, submit, teams

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", dashboard.dashboard, name="web-dashboard"),
    path("jobs/", job_list.job_list, name="web-job-list"),
    path("jobs/new/", submit.job_new, name="web-job-new"),
    path("jobs/new/preview/", submit.job_new_preview, name="web-job-new-preview"),
    path("jobs/new/convert/", submit.job_new_convert, name="web-job-new-convert"),
    path("jobs/compare/", jobs.job_compare, name="web-job-compare"),
    path("jobs/<int:job_id>/", jobs.job_detail, name="web-job-detail"),
    path("nodes/", nodes.node_list, name="web-node-list"),
    path("nodes/<int:node_id>/", nodes.node_detail, name="web-node-detail"),
    path("teams/", teams.team_list, name="web-team-list"),
    path("teams/<slug:slug>/", teams.team_detail, name="web-team-detail"),
    path("account/", account.account, name="web-account"),
]
