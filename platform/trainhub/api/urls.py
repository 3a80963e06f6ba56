from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from .auth import ObtainTokenView
from .views import EnrollmentTokenView, JobViewSet, NodeViewSet, TeamViewSet

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("teams", TeamViewSet, basename="team")
router.register("nodes", NodeViewSet, basename="node")

urlpatterns = [
    path("v1/auth/token/", ObtainTokenView.as_view(), name="auth-token"),
    path("v1/enrollment-tokens/", EnrollmentTokenView.as_view(), name="enrollment-tokens"),
    path("v1/", include("trainhub.agents.api.urls")),
    path("v1/", include(router.urls)),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
]
