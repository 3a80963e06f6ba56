from django.apps import AppConfig


class NodesConfig(AppConfig):
    name = "trainhub.nodes"
