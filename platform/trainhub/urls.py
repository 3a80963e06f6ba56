from django.contrib import admin
from django.urls import include, path

from trainhub.api.health import healthz, readyz
from trainhub.api.prometheus import metrics
from trainhub.web import errors
from trainhub.web.signin import throttled_sign_in

urlpatterns = [
    # Ahead of the admin's own URLs: its sign-in form is rate limited like the others.
    path("admin/login/", throttled_sign_in(admin.site.login)),
    path("admin/", admin.site.urls),
    path("api/", include("trainhub.api.urls")),
    path("agent/", include("trainhub.agents.urls")),
    path("healthz", healthz),
    path("readyz", readyz),
    path("metrics", metrics),
    path("", include("trainhub.web.urls")),
]

# JSON under /api/, a page with the site's navigation elsewhere.
handler403 = errors.forbidden
handler404 = errors.not_found
handler500 = errors.server_error
