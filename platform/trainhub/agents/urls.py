"""`/agent/`: the installer and the runtime wheel that new nodes download."""

from django.urls import path

from .install_views import dist_index, dist_wheel, install_script

urlpatterns = [
    path("install.sh", install_script, name="agent-install-script"),
    path("dist/", dist_index, name="agent-dist"),
    path("dist/<str:filename>", dist_wheel, name="agent-dist-wheel"),
]
