"""The experiment pages: `/experiments/` and `/experiments/<id>/` (its polled body and its
actions), and a trial's job in the jobs list.

Actions go through the same services and policies as the API's: a member pauses, resumes
and cancels; a viewer sees no button and is refused with 403; another team's experiment
is 404. The page, its body and the list take a fixed number of queries however many
trials there are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from trainhub.experiments.models import Experiment, ExperimentState, TrialState
from trainhub.experiments.services import create_experiment
from trainhub.experiments.spec import parse_experiment
from trainhub.jobs.models import Job
from trainhub.tenancy.choices import Role

from ..event_capture import HANDLER
from ..experiments.driver import advance, end_run, running
from ..factories import make_job, make_team, make_user, spec

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
BODY = {**HTMX, "HX-Target": "experiment-body"}
ACTIONS = {**HTMX, "HX-Target": "experiment-actions"}


@pytest.fixture(autouse=True)
def _events_to_the_recorder_only(settings: Any) -> None:
    settings.EVENT_HANDLERS = [HANDLER]


def make_experiment(
    user: User, name: str = "mf-search", team: str = "recsys", **search: Any
) -> Experiment:
    body = {
        **spec(name=name, team=team),
        "search": {
            "method": "asha",
            "metric": "test_rmse",
            "max_trials": 9,
            "max_concurrent": 2,
            "max_budget": 9,
            "params": {
                "lr": {"type": "log_uniform", "low": 0.01, "high": 0.3},
                "dim": {"type": "categorical", "values": [8, 16, 32]},
            },
            **search,
        },
    }
    job_spec, search_spec = parse_experiment(body, user=user)
    return create_experiment(user=user, spec=job_spec, search=search_spec, now=timezone.now())


@dataclass
class World:
    alice: User  # member of recsys
    vic: User  # viewer of recsys
    bob: User  # member of ads only
    root: User  # platform admin
    experiment: Experiment  # alice's, running, two trials started


@pytest.fixture
def world() -> World:
    alice, vic, bob = make_user("alice"), make_user("vic"), make_user("bob")
    make_team("recsys", members={alice: Role.MEMBER, vic: Role.VIEWER})
    make_team("ads", members={bob: Role.MEMBER})
    return World(alice, vic, bob, make_user("root", superuser=True), make_experiment(alice))


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _finish_round(experiment: Experiment, values: list[float]) -> Experiment:
    """End each running trial's job with the next value (at its rung's epochs)."""
    for trial, value in zip(running(experiment), values, strict=False):
        assert trial.job is not None
        end_run(trial.job, test_rmse=value, epoch=trial.job.job_spec.args["epochs"])
    return advance(experiment)


def _trial_rows(page: str) -> list[str]:
    return re.findall(r'<tr id="trial-(\d+)"', page)


def test_the_page_shows_state_trials_and_the_best_trial(world: World) -> None:
    client = _client(world.alice)
    url = f"/experiments/{world.experiment.pk}/"
    page = client.get(url).content.decode()
    assert 'id="experiment-state" class="state state-running"' in page
    assert _trial_rows(page) == ["1", "2"]
    assert '<th scope="col"><code>lr</code></th>' in page and "<code>dim</code>" in page
    assert 'id="best-none"' in page
    assert 'hx-trigger="every 2s' in page  # live while it runs
    first = running(world.experiment)[0]
    assert first.job is not None
    assert f'href="/jobs/{first.job.pk}/" id="trial-1-job"' in page

    exp = _finish_round(world.experiment, [0.93, 0.91])
    page = client.get(url, headers=BODY).content.decode()
    assert not page.lstrip().startswith("<!doctype")  # the fragment alone
    assert _trial_rows(page) == ["1", "2", "3", "4"]  # two new trials started
    assert exp.best_trial is not None and exp.best_trial.number == 2
    assert 'id="best-trial-link">Trial 2</a>' in page
    assert '<strong id="best-metric">0.91</strong>' in page
    best = exp.best_trial
    assert best.job is not None
    assert f'href="/jobs/{best.job.pk}/" id="best-job-link"' in page
    assert 'class="best-trial"' in page and "best</span>" in page
    # One plot per parameter, the best trial's point marked.
    assert page.count('<figure class="param-plot"') == 2
    assert 'class="point best"' in page


def test_an_ended_experiment_stops_polling(world: World) -> None:
    Experiment.objects.filter(pk=world.experiment.pk).update(
        state=ExperimentState.SUCCEEDED, message="best test_rmse 0.9: trial 1"
    )
    page = _client(world.alice).get(f"/experiments/{world.experiment.pk}/").content.decode()
    assert 'hx-trigger="every' not in page
    assert 'data-ended="true"' in page and "best test_rmse 0.9: trial 1" in page
    assert 'id="experiment-pause"' not in page and 'id="experiment-cancel"' not in page


def test_other_teams_get_404_and_the_list_shows_only_their_own(world: World) -> None:
    bob = _client(world.bob)
    url = f"/experiments/{world.experiment.pk}/"
    assert bob.get(url).status_code == 404
    assert bob.get(url, headers=BODY).status_code == 404
    for action in ("pause", "resume", "cancel"):
        assert bob.post(f"{url}{action}/").status_code == 404
    make_experiment(world.bob, name="ctr-search", team="ads")
    listed = bob.get("/experiments/").content.decode()
    assert "ctr-search" in listed and "mf-search" not in listed
    listed = _client(world.alice).get("/experiments/").content.decode()
    assert "mf-search" in listed and "ctr-search" not in listed
    assert f'href="/experiments/{world.experiment.pk}/"' in listed
    assert "2 <small>of 9</small>" in listed  # trials started, of at most


def test_a_viewer_sees_no_buttons_and_is_refused(world: World) -> None:
    vic = _client(world.vic)
    url = f"/experiments/{world.experiment.pk}/"
    page = vic.get(url).content.decode()
    assert 'id="experiment-pause"' not in page and 'id="experiment-cancel"' not in page
    for action in ("pause", "resume", "cancel"):
        assert vic.post(f"{url}{action}/").status_code == 403
    world.experiment.refresh_from_db()
    assert world.experiment.state == ExperimentState.RUNNING
    member = _client(world.alice).get(url).content.decode()
    assert 'id="experiment-pause"' in member and 'id="experiment-cancel"' in member
    assert 'id="experiment-resume"' not in member


def test_a_member_pauses_resumes_and_cancels(world: World) -> None:
    client = _client(world.alice)
    url = f"/experiments/{world.experiment.pk}/"
    jobs = [t.job for t in running(world.experiment)]
    assert client.get(f"{url}pause/").status_code == 405  # POST only

    answer = client.post(f"{url}pause/")
    assert answer.status_code == 303 and answer["Location"] == url
    assert all(Job.objects.get(pk=j.pk).held for j in jobs if j)
    page = client.get(url).content.decode()
    assert 'class="state state-paused"' in page
    assert 'id="experiment-resume"' in page and 'id="experiment-pause"' not in page

    # Paused twice: the service refuses; the page says why (409, nothing changed).
    again = client.post(f"{url}pause/")
    assert again.status_code == 409
    assert "only a running one pauses" in again.content.decode()

    # From the page (htmx): the actions partial comes back with the outcome.
    resumed = client.post(f"{url}resume/", headers=ACTIONS).content.decode()
    assert resumed.lstrip().startswith('<div id="experiment-actions"')
    assert 'class="notice"' in resumed and 'data-state="running"' in resumed
    assert not any(Job.objects.get(pk=j.pk).held for j in jobs if j)

    cancelled = client.post(f"{url}cancel/", headers=ACTIONS).content.decode()
    assert "Cancelled" in cancelled and 'data-state="cancelled"' in cancelled
    assert 'id="experiment-cancel"' not in cancelled
    world.experiment.refresh_from_db()
    assert world.experiment.state == ExperimentState.CANCELLED
    assert set(world.experiment.trials.values_list("state", flat=True)) == {TrialState.CANCELLED}
    refused = client.post(f"{url}cancel/", headers=ACTIONS)
    assert refused.status_code == 200 and 'id="action-error"' in refused.content.decode()


def test_the_actions_fragment_follows_the_state(world: World) -> None:
    client = _client(world.alice)
    url = f"/experiments/{world.experiment.pk}/"
    Experiment.objects.filter(pk=world.experiment.pk).update(state=ExperimentState.PAUSED)
    actions = client.get(url, headers=ACTIONS).content.decode()
    assert actions.lstrip().startswith('<div id="experiment-actions"')
    assert 'id="experiment-resume"' in actions and 'id="experiment-pause"' not in actions


def test_page_body_and_list_take_a_fixed_number_of_queries(
    world: World, django_assert_num_queries: Any
) -> None:
    client = _client(world.alice)
    url = f"/experiments/{world.experiment.pk}/"

    def counts() -> None:
        # session, user, navigation, experiment, trials with their jobs, the policy
        with django_assert_num_queries(6):
            assert client.get(url).status_code == 200
        # session, user, experiment, trials with their jobs
        with django_assert_num_queries(4):
            assert client.get(url, headers=BODY).status_code == 200
        # session, user, navigation, count, the page of experiments
        with django_assert_num_queries(5):
            assert client.get("/experiments/").status_code == 200

    counts()
    exp = world.experiment
    for values in ([0.95, 0.94], [0.93, 0.92], [0.91, 0.90]):
        exp = _finish_round(exp, values)
    assert exp.trials.count() > 4
    make_experiment(world.alice, name="second")
    counts()


def test_a_trials_jobs_name_their_experiment_in_the_jobs_list(
    world: World, django_assert_num_queries: Any
) -> None:
    client = _client(world.alice)
    plain = make_job(world.alice, name="plain")
    # session, user, navigation, the filter's teams, count, rows (with their trials),
    # queue positions: as many as without experiments (test_job_list.py)
    with django_assert_num_queries(7):
        before = client.get("/jobs/").content.decode()
    exp = world.experiment
    for values in ([0.90, 0.94], [0.99, 0.98]):  # trials 1-4 run rung 0; 1 is promoted
        exp = _finish_round(exp, values)
    promoted = exp.trials.get(number=1)
    assert promoted.job is not None and promoted.job != promoted.first_job
    assert promoted.job.checkpoints_of == promoted.first_job
    with django_assert_num_queries(7):
        page = client.get("/jobs/").content.decode()
    link = f'<a href="/experiments/{exp.pk}/">experiment mf-search</a> · trial'
    assert page.count(link) == exp.trials.count() + 1  # trial 1 ran twice
    row = page.split(f'data-job-id="{promoted.job.pk}"')[1].split("</tr>")[0]
    assert f"{link} 1</span>" in row
    plain_row = page.split(f'data-job-id="{plain.pk}"')[1].split("</tr>")[0]
    assert "experiment" not in plain_row
    assert before.count(link) == 2


def test_a_trials_job_page_links_its_experiment(world: World) -> None:
    client = _client(world.alice)
    exp = world.experiment
    for values in ([0.90, 0.94], [0.99, 0.98]):  # trial 1 is promoted: a second run
        exp = _finish_round(exp, values)
    promoted = exp.trials.get(number=1)
    link = f'<a href="/experiments/{exp.pk}/">trial 1 of mf-search</a>'
    assert promoted.job is not None and promoted.first_job is not None
    for job in (promoted.first_job, promoted.job):
        assert link in client.get(f"/jobs/{job.pk}/").content.decode()
    plain = make_job(world.alice, name="plain")
    assert "trial" not in client.get(f"/jobs/{plain.pk}/").content.decode().split("</h1>")[0]
