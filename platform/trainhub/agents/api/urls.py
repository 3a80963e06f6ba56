from django.urls import path

from .views import CredentialView, DesiredTasksView, EnrollView

urlpatterns = [
    path("nodes/enroll/", EnrollView.as_view(), name="node-enroll"),
    path("agent/tasks/", DesiredTasksView.as_view(), name="agent-tasks"),
    path("agent/credential/", CredentialView.as_view(), name="agent-credential"),
]
