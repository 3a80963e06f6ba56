"""Page paths are a contract (docs/design.md §2): tests, bookmarks and the README use them."""

from django.contrib.auth import views as auth_views
from django.urls import path

from .views import jobs

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", jobs.job_list, name="web-job-list"),
    path("jobs/<int:job_id>/", jobs.job_detail, name="web-job-detail"),
]
