from django.urls import path

from .views import DesiredTasksView, EnrollView

urlpatterns = [
    path("nodes/enroll/", EnrollView.as_view(), name="node-enroll"),
    path("agent/tasks/", DesiredTasksView.as_view(), name="agent-tasks"),
]
