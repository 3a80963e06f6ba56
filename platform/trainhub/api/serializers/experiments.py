"""Experiments and their trials."""

from __future__ import annotations

from rest_framework import serializers

from trainhub.experiments.models import Experiment, Trial
from trainhub.experiments.searchspec import BUDGET_METRICS, GOALS, MAX_TRIALS, METHODS, PARAM_TYPES
from trainhub.jobs.spec import JobSpecSerializer
from trainhub.strictjson import StrictSerializer


class TrialSerializer(serializers.ModelSerializer):
    job: serializers.PrimaryKeyRelatedField = serializers.PrimaryKeyRelatedField(read_only=True)
    jobs = serializers.SerializerMethodField()
    results = serializers.JSONField(read_only=True, help_text="The metric at each completed rung.")

    class Meta:
        model = Trial
        fields = [
            "number",
            "params",
            "state",
            "rung",
            "results",
            "best_metric",
            "budget_done",
            "job",
            "jobs",
            "message",
            "created_at",
            "finished_at",
        ]

    def get_jobs(self, trial: Trial) -> list[int]:
        """Every job that ran the trial, first to last."""
        return list(trial.run_jobs().values_list("id", flat=True))


class ExperimentSerializer(serializers.ModelSerializer):
    team: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    submitted_by: serializers.StringRelatedField = serializers.StringRelatedField()
    url = serializers.HyperlinkedIdentityField(view_name="experiment-detail")
    best_trial = serializers.SerializerMethodField()
    trials = TrialSerializer(many=True, read_only=True)

    class Meta:
        model = Experiment
        fields = [
            "id",
            "url",
            "name",
            "team",
            "submitted_by",
            "priority",
            "state",
            "pending_reason",
            "message",
            "search",
            "spec",
            "best_trial",
            "best_metric",
            "created_at",
            "finished_at",
            "trials",
        ]

    def get_best_trial(self, experiment: Experiment) -> int | None:
        """The number of the trial with the best metric so far."""
        return experiment.best_trial.number if experiment.best_trial else None


class ParamSerializer(StrictSerializer):
    """One searched argument: a range, or a list of values (`categorical`)."""

    type = serializers.ChoiceField(choices=PARAM_TYPES)
    low = serializers.FloatField(required=False)
    high = serializers.FloatField(required=False)
    values = serializers.ListField(child=serializers.JSONField(), required=False, min_length=1)


class SearchSerializer(StrictSerializer):
    """The `search:` block (docs/experiments.md)."""

    method = serializers.ChoiceField(choices=METHODS)
    metric = serializers.CharField(max_length=100, help_text="The reported metric to optimize.")
    goal = serializers.ChoiceField(choices=GOALS, required=False)
    params = serializers.DictField(child=ParamSerializer())
    max_trials = serializers.IntegerField(min_value=1, max_value=MAX_TRIALS, required=False)
    max_concurrent = serializers.IntegerField(min_value=1, max_value=100, required=False)
    budget = serializers.ChoiceField(choices=list(BUDGET_METRICS), required=False)
    budget_arg = serializers.CharField(max_length=100, required=False)
    max_budget = serializers.IntegerField(min_value=1, max_value=10**9, required=False)
    min_budget = serializers.IntegerField(min_value=1, max_value=10**9, required=False)
    reduction_factor = serializers.IntegerField(min_value=2, max_value=100, required=False)
    max_failed_trials = serializers.IntegerField(min_value=0, max_value=MAX_TRIALS, required=False)
    grid_points = serializers.IntegerField(min_value=1, max_value=100, required=False)
    seed = serializers.IntegerField(min_value=0, max_value=2**32 - 1, required=False)


class ExperimentSpecSerializer(JobSpecSerializer):
    """Each trial's job spec plus the search (for the schema: `parse_experiment` checks)."""

    search = SearchSerializer()


class TrialCurveSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    state = serializers.CharField()
    params = serializers.DictField()
    points = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField(), min_length=2, max_length=2),
        help_text="[budget, metric] pairs over every run of the trial.",
    )


class CurvesSerializer(serializers.Serializer):
    metric = serializers.CharField()
    budget = serializers.CharField()
    goal = serializers.CharField()
    trials = TrialCurveSerializer(many=True)
