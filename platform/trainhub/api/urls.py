from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from .auth import ObtainTokenView
from .views.accounts import ApiTokenViewSet
from .views.codearchives import CodeArchiveDownloadView, CodeArchiveUploadView
from .views.experiments import ExperimentViewSet
from .views.jobs import JobViewSet
from .views.models import JobModelView, ModelVersionViewSet
from .views.nodes import EnrollmentTokenViewSet, NodeViewSet
from .views.notifications import NotificationChoicesView, WebhookViewSet
from .views.teams import TeamViewSet, UserViewSet
from .views.whatif import WhatIfView

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("experiments", ExperimentViewSet, basename="experiment")
router.register("teams", TeamViewSet, basename="team")
router.register("nodes", NodeViewSet, basename="node")
router.register("enrollment-tokens", EnrollmentTokenViewSet, basename="enrollment-token")
router.register("users", UserViewSet, basename="user")
router.register("tokens", ApiTokenViewSet, basename="token")
router.register("webhooks", WebhookViewSet, basename="webhook")
router.register("models", ModelVersionViewSet, basename="model-version")

urlpatterns = [
    path("v1/auth/token/", ObtainTokenView.as_view(), name="auth-token"),
    path("v1/", include("trainhub.agents.api.urls")),
    path("v1/code/", CodeArchiveUploadView.as_view(), name="code-upload"),
    path("v1/code/<str:digest>/", CodeArchiveDownloadView.as_view(), name="code-download"),
    path("v1/whatif/", WhatIfView.as_view(), name="whatif"),
    path("v1/jobs/<int:pk>/model/", JobModelView.as_view(), name="job-model"),
    path(
        "v1/users/me/notifications/",
        NotificationChoicesView.as_view(),
        name="notification-choices",
    ),
    path("v1/", include(router.urls)),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
]
