from django.contrib.auth import views as auth_views
from django.urls import path

from . import views

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.job_list, name="web-job-list"),
    path("jobs/<int:job_id>/", views.job_detail, name="web-job-detail"),
]
