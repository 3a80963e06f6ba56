from django.contrib import admin
from django.urls import include, path

from trainhub.api.health import healthz, readyz

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("trainhub.api.urls")),
    path("agent/", include("trainhub.agents.urls")),
    path("healthz", healthz),
    path("readyz", readyz),
    path("", include("trainhub.web.urls")),
]
