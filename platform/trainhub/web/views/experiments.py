"""The experiment pages: `/experiments/` lists the searches of the user's teams;
`/experiments/<id>/` shows one — its state, best trial, trials, a chart of every trial's
metric over its budget (frontend/src/pages/experiment.js, from the API's `curves/`) and
each parameter against the metric (`web.paramplot`).

Live by polling, as the dashboard: while the experiment has not ended, its body (an htmx
fragment of this same view) is asked for every 2 s, so new trials show without a reload;
an ended experiment's body carries no trigger, so polling stops. The actions (pause,
resume, cancel) are a fragment of their own (`HX-Target: experiment-actions`): a poll
never closes the cancel dialog or takes the focus from a button.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from trainhub.experiments.models import Experiment, ExperimentState, Trial, TrialState
from trainhub.experiments.services import (
    ExperimentStateError,
    cancel_experiment,
    pause_experiment,
    resume_experiment,
)
from trainhub.tenancy.policies import can_submit

from ..htmx import is_fragment_request
from ..paramplot import TrialPoint, number_text, param_plots
from .job_list import span_text

PAGE_SIZE = 50
POLL_SECONDS = 2
BODY_FRAGMENT = "web/partials/experiment_body.html"
ACTIONS_FRAGMENT = "web/partials/experiment_actions.html"
ACTIONS_TARGET = "experiment-actions"


@dataclass(frozen=True)
class TrialRow:
    trial: Trial
    values: tuple[str, ...]  # one per searched parameter, in the search's order
    rung: str  # the rung it runs toward or completed last, with its budget
    metric: str  # its best metric so far, "—" for none
    duration: str  # from its first run's start to its latest run's end (or now)
    best: bool


def visible_experiment(request: HttpRequest, experiment_id: int) -> Experiment:
    """The experiment if the user may see it; 404 otherwise (as the API does)."""
    return get_object_or_404(
        Experiment.objects.visible_to(request.user).select_related("team", "submitted_by"),
        pk=experiment_id,
    )


def trial_duration(trial: Trial, now: datetime) -> str:
    first, latest = trial.first_job, trial.job
    if first is None or first.started_at is None or latest is None:
        return ""
    return span_text(first.started_at, latest.finished_at, now)


def rung_text(rung: int, rungs: tuple[int, ...], unit: str) -> str:
    """`1 (3 epochs)`; the rung alone when trials run as their spec says (no budget)."""
    if not unit or rung >= len(rungs):
        return str(rung)
    budget = rungs[rung]
    return f"{rung} ({budget} {unit.removesuffix('s') if budget == 1 else unit})"


def body_context(experiment: Experiment) -> dict[str, Any]:
    """What the polled body shows: state, best trial, trials, parameter plots."""
    search = experiment.search_spec
    trials = list(experiment.trials.select_related("job", "first_job").order_by("number"))
    best = next((t for t in trials if t.pk == experiment.best_trial_id), None)
    names = [p.name for p in search.params]
    rungs = search.rungs()
    now = timezone.now()
    rows = [
        TrialRow(
            trial=t,
            values=tuple(number_text(t.params[n]) if n in t.params else "—" for n in names),
            rung=rung_text(t.rung, rungs, search.budget if search.max_budget else ""),
            metric="—" if t.best_metric is None else number_text(t.best_metric),
            duration=trial_duration(t, now),
            best=best is not None and t.pk == best.pk,
        )
        for t in trials
    ]
    counts = Counter(t.state for t in trials)
    return {
        "experiment": experiment,
        "search": search,
        "param_names": names,
        "rows": rows,
        "best": best,
        "best_values": [(n, number_text(best.params[n])) for n in names if n in best.params]
        if best
        else [],
        "counts": [(value, counts[value]) for value in TrialState.values if counts[value]],
        "plots": param_plots(
            search.params,
            [TrialPoint(t.number, t.params, t.best_metric) for t in trials],
            metric=search.metric,
            goal=search.goal,
            best=best.number if best else None,
        ),
        "poll_seconds": POLL_SECONDS,
        # Changes whenever a row would: the page fetches the curves again when it does.
        "signature": "|".join(f"{t.number}:{t.state}:{t.rung}:{t.best_metric}" for t in trials),
    }


def action_context(
    request: HttpRequest, experiment: Experiment, *, notice: str = "", action_error: str = ""
) -> dict[str, Any]:
    """What the actions partial shows: only what the user may do to the experiment now."""
    may = not experiment.ended and can_submit(request.user, experiment.team)
    return {
        "experiment": experiment,
        "may_pause": may and experiment.state == ExperimentState.RUNNING,
        "may_resume": may and experiment.state == ExperimentState.PAUSED,
        "may_cancel": may,
        "notice": notice,
        "action_error": action_error,
    }


def page_context(request: HttpRequest, experiment: Experiment, **actions: Any) -> dict[str, Any]:
    return {
        **body_context(experiment),
        **action_context(request, experiment, **actions),
        "section": "experiments",
        "spec_yaml": yaml.safe_dump(experiment.spec, sort_keys=False),
        "search_yaml": yaml.safe_dump(experiment.search, sort_keys=False),
    }


@login_required
def experiment_list(request: HttpRequest) -> HttpResponse:
    experiments = (
        Experiment.objects.visible_to(request.user)
        .select_related("team", "submitted_by")
        .annotate(trial_count=Count("trials"))
        .defer("spec")
        .order_by("-id")
    )
    page = Paginator(experiments, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "web/experiment_list.html",
        {"section": "experiments", "page": page, "experiments": list(page.object_list)},
    )


@login_required
def experiment_detail(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = visible_experiment(request, experiment_id)
    if is_fragment_request(request):
        if request.headers.get("HX-Target") == ACTIONS_TARGET:
            return render(request, ACTIONS_FRAGMENT, action_context(request, experiment))
        # No request context: the body has no form and no navigation (one query less).
        return HttpResponse(render_to_string(BODY_FRAGMENT, body_context(experiment)))
    return render(request, "web/experiment_detail.html", page_context(request, experiment))


Change = Callable[..., Experiment]


def _change(request: HttpRequest, experiment_id: int, change: Change, done: str) -> HttpResponse:
    """Pause, resume or cancel through the services the API uses; an htmx post gets the
    actions partial back (with the outcome), a plain one a redirect to the page."""
    experiment = visible_experiment(request, experiment_id)
    if not can_submit(request.user, experiment.team):
        raise PermissionDenied("Viewers cannot change experiments.")
    outcome: dict[str, str] = {"notice": done}
    status = 200
    try:
        change(experiment=experiment, actor=str(request.user), now=timezone.now())
    except ExperimentStateError as exc:
        outcome, status = {"action_error": str(exc)}, 409
    experiment.refresh_from_db()
    if is_fragment_request(request):
        # 200 even for a refusal: htmx swaps only successful answers; the partial says it.
        return render(request, ACTIONS_FRAGMENT, action_context(request, experiment, **outcome))
    if status == 200:
        redirect = HttpResponseRedirect(reverse("web-experiment-detail", args=[experiment.pk]))
        redirect.status_code = 303  # See Other: the page, fetched with GET
        return redirect
    return render(
        request,
        "web/experiment_detail.html",
        page_context(request, experiment, **outcome),
        status=status,
    )


@login_required
@require_POST
def experiment_pause(request: HttpRequest, experiment_id: int) -> HttpResponse:
    return _change(
        request,
        experiment_id,
        pause_experiment,
        "Paused: its trials are held in the queue (a running one checkpoints and stops first).",
    )


@login_required
@require_POST
def experiment_resume(request: HttpRequest, experiment_id: int) -> HttpResponse:
    return _change(
        request, experiment_id, resume_experiment, "Resumed: its trials are queued again."
    )


@login_required
@require_POST
def experiment_cancel(request: HttpRequest, experiment_id: int) -> HttpResponse:
    return _change(
        request,
        experiment_id,
        cancel_experiment,
        "Cancelled: its unfinished trials are being stopped.",
    )
