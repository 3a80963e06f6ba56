"""`/jobs/new/`: submit a job from a form or from the YAML the CLI takes, with a preview.

Both editors post the same spec document to the API's validation (`parse_job_spec`) and
submission (`submit_job`); the preview is `scheduling.preview`, as `?dry_run=true` is.
A code archive chosen in the form is kept as `POST /api/v1/code/` keeps it
(`web.codeupload`): at once by `/jobs/new/code/`, or with the form when it is submitted.
With the search section ticked (`web.search_forms`), the same job plus its search block
is submitted as an experiment (`parse_experiment`, `create_experiment`) instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import NON_FIELD_ERRORS
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST
from rest_framework.exceptions import ValidationError
from rest_framework.throttling import UserRateThrottle

from trainhub.experiments.searchspec import SearchSpec, SearchSpecError
from trainhub.experiments.services import create_experiment
from trainhub.experiments.spec import parse_experiment
from trainhub.jobs.jobspec import JobSpec
from trainhub.jobs.models import Job
from trainhub.jobs.services import PriorityCapExceeded, submit_job
from trainhub.jobs.spec import parse_job_spec
from trainhub.scheduling.preview import preview_submission
from trainhub.tenancy.choices import SUBMITTERS
from trainhub.tenancy.models import Team
from trainhub.tenancy.policies import is_platform_admin

from ..codeupload import CodeRefused, receive_code_archive
from ..forms import (
    CODE_FILE,
    EXAMPLE_ENTRYPOINTS,
    FIELDS,
    JobSpecForm,
    SpecDocumentError,
    YamlSpecForm,
    add_spec_errors,
    default_document,
    dump_yaml,
    spec_errors,
)
from ..search_forms import ENABLED, INITIAL, SearchForm
from ..yamllines import locate_errors

TABS = ("form", "yaml")
FORBIDDEN = (
    "You cannot submit jobs: you are not a member of a team that may submit. Viewers "
    "cannot submit; ask one of your team's admins to make you a member."
)


def submittable_teams(user: Any) -> QuerySet[Team]:
    """The teams `user` may submit to (every team for a platform admin)."""
    if is_platform_admin(user):
        return Team.objects.order_by("slug")
    return Team.objects.filter(
        memberships__user=user, memberships__role__in=list(SUBMITTERS)
    ).order_by("slug")


@dataclass
class Editors:
    """The two editors over one spec, which of them is shown, and what was wrong."""

    form: JobSpecForm
    yaml: YamlSpecForm
    tab: str
    yaml_errors: list[tuple[str, str]] = field(default_factory=list)
    spec: JobSpec | None = None

    @property
    def errors(self) -> list[tuple[str, str]]:
        if self.tab == "yaml":
            return self.yaml_errors
        return [
            ("" if path == NON_FIELD_ERRORS else path, str(message))
            for path, messages in self.form.errors.items()
            for message in messages
        ]

    @property
    def yaml_marks(self) -> list[dict[str, object]]:
        """The YAML tab's errors, each with the line (and column) of the text it is on."""
        if not self.yaml_errors:
            return []
        text = self.yaml.data.get("spec", "") if self.yaml.is_bound else ""
        return [error.as_mark() for error in locate_errors(str(text), self.yaml_errors)]

    @property
    def listed_errors(self) -> list[dict[str, object]]:
        """The errors as the preview's "Check" lists them: the YAML tab's with their line
        (`yaml_marks`: the lines the editor marks), the form's by field alone."""
        if self.tab == "yaml":
            return self.yaml_marks
        return [{"path": path, "message": message} for path, message in self.errors]

    def refuse(self, errors: list[tuple[str, str]]) -> None:
        """Show `errors` beside the field (form) or beside the YAML they name."""
        self.spec = None
        if self.tab == "form":
            add_spec_errors(self.form, errors)
            return
        self.yaml_errors += errors
        for path, message in errors:
            self.yaml.add_error("spec", f"{path}: {message}" if path != "spec" else message)


class _SubmissionRate(UserRateThrottle):
    """`TRAINHUB_SUBMIT_RATE` per user, counted with the API's submissions and clones
    (the same scope, so the same counts in the cache)."""

    scope = "submit"


def _throttled(request: HttpRequest) -> int | None:
    """Seconds to wait when this post is over the user's submission rate; None if not."""
    throttle = _SubmissionRate()
    if throttle.allow_request(request, None):  # type: ignore[arg-type]
        return None
    return int(throttle.wait() or 1)


def _teams(user: Any) -> list[tuple[str, str]]:
    return [(t.slug, t.slug) for t in submittable_teams(user)]


def _tab(value: str | None) -> str:
    return value if value in TABS else "form"


def _posted(
    request: HttpRequest, teams: list[tuple[str, str]], data: QueryDict | None = None
) -> Editors:
    """The posted editors, as typed (nothing read yet)."""
    return Editors(
        form=JobSpecForm(request.POST if data is None else data, teams=teams),
        yaml=YamlSpecForm(request.POST),
        tab=_tab(request.POST.get("mode") or request.POST.get("tab")),
    )


def _read(request: HttpRequest, teams: list[tuple[str, str]], *, upload: bool = False) -> Editors:
    """The posted editors; `spec` is set when the active one holds a valid spec.

    `upload`: a code archive posted with the form is kept first and its digest becomes
    the form's `code` (shown again if the spec is refused, so it need not be chosen again);
    a refused archive is named beside its field and refuses the submission."""
    data: QueryDict = request.POST
    refused = ""
    chosen = request.FILES.get(CODE_FILE) if upload else None
    if chosen is not None and _tab(data.get("mode") or data.get("tab")) == "form":
        try:
            stored = receive_code_archive(
                chosen, team=data.get("team", ""), teams=teams, user=request.user
            )
        except CodeRefused as exc:
            refused = exc.message
        else:
            data = data.copy()
            data["code"] = stored.archive.digest
    editors = _posted(request, teams, data)
    try:
        active = editors.form if editors.tab == "form" else editors.yaml
        document = active.document()
        editors.spec = parse_job_spec(document, user=request.user)
    except SpecDocumentError as exc:
        editors.refuse([(exc.path, exc.message)])
    except ValidationError as exc:
        editors.refuse(spec_errors(exc.detail))
    if refused:
        editors.refuse([(CODE_FILE, refused)])
    return editors


def _starting_document(request: HttpRequest, teams: list[tuple[str, str]]) -> dict[str, Any]:
    """A new spec, or (`?clone=<id>`) a copy of a job's the user can see, renamed."""
    clone = request.GET.get("clone")
    if not clone:
        return default_document(team=teams[0][0])
    if not (clone.isascii() and clone.isdigit()):
        raise Http404("No such job.")
    job = get_object_or_404(Job.objects.visible_to(request.user), pk=int(clone))
    document = dict(job.spec)
    document["name"] = f"{job.name[:95]}-copy"
    return document


def _page(
    request: HttpRequest, editors: Editors, search: SearchForm | None = None, **extra: Any
) -> HttpResponse:
    return render(
        request,
        "web/job_new.html",
        {
            "section": "submit",
            "editors": editors,
            "search": search if search is not None else SearchForm(initial=INITIAL),
            "examples": EXAMPLE_ENTRYPOINTS,
            **extra,
        },
    )


def _submit_experiment(request: HttpRequest, editors: Editors, search: SearchForm) -> HttpResponse:
    """The page's job plus the search section as an experiment (`parse_experiment`, as
    `POST /api/v1/experiments/` reads it); its page, or this one with the errors."""
    try:
        block: dict[str, Any] | None = search.document()
    except SpecDocumentError as exc:
        search.add_errors([(exc.path, exc.message)])
        block = None
    if editors.spec is None or block is None:
        if block is not None:  # the job is refused: say what is wrong with the search too
            try:
                SearchSpec.from_dict(block)
            except SearchSpecError as exc:
                search.add_errors(exc.errors.items())
        return _page(request, editors, search)
    assert isinstance(request.user, User)
    document = {**editors.spec.to_dict(), "search": block}
    try:
        spec, parsed = parse_experiment(document, user=request.user)
        experiment = create_experiment(
            user=request.user, spec=spec, search=parsed, now=timezone.now()
        )
    except ValidationError as exc:
        errors = spec_errors(exc.detail)
        search.add_errors(e for e in errors if e[0].split(".")[0] == "search")
        editors.refuse([e for e in errors if e[0].split(".")[0] != "search"])
        return _page(request, editors, search)
    except PriorityCapExceeded as exc:
        editors.refuse([("priority", str(exc))])
        return _page(request, editors, search)
    return redirect("web-experiment-detail", experiment_id=experiment.pk)


@login_required
def job_new(request: HttpRequest) -> HttpResponse:
    teams = _teams(request.user)
    if not teams:
        return render(
            request, "web/job_new.html", {"section": "submit", "forbidden": FORBIDDEN}, status=403
        )
    if request.method != "POST":
        document = _starting_document(request, teams)
        editors = Editors(
            form=JobSpecForm(initial=JobSpecForm.initial_for(document), teams=teams),
            yaml=YamlSpecForm(initial={"spec": dump_yaml(document)}),
            tab=_tab(request.GET.get("tab")),
        )
        search = SearchForm(initial={**INITIAL, ENABLED: request.GET.get("search") == "1"})
        return _page(request, editors, search, cloned_from=request.GET.get("clone"))
    search = SearchForm(request.POST)
    wait = _throttled(request)
    if wait is not None:
        # Refused before the spec is read: nothing is created; what was typed stays.
        editors = _posted(request, teams)
        message = f"Too many submissions: try again in {wait} s. Nothing was submitted."
        editors.refuse([("spec" if editors.tab == "yaml" else "", message)])
        response = _page(request, editors, search)
        response.status_code = 429
        response["Retry-After"] = str(wait)
        return response
    editors = _read(request, teams, upload=True)
    if search.enabled:
        return _submit_experiment(request, editors, search)
    if editors.spec is not None:
        assert isinstance(request.user, User)
        try:
            job = submit_job(user=request.user, spec=editors.spec, now=timezone.now())
        except PriorityCapExceeded as exc:
            editors.refuse([("priority", str(exc))])
        else:
            return redirect("web-job-detail", job_id=job.pk)
    return _page(request, editors, search)


@login_required
@require_POST
def job_new_preview(request: HttpRequest) -> HttpResponse:
    """The preview fragment: would the posted spec start now, or why would it wait?"""
    teams = _teams(request.user)
    if not teams:
        return HttpResponse(FORBIDDEN, status=403)
    editors = _read(request, teams)
    preview = None
    if editors.spec is not None:
        try:
            preview = preview_submission(editors.spec, now=timezone.now())
        except PriorityCapExceeded as exc:
            editors.refuse([("priority", str(exc))])
    return render(
        request, "web/partials/job_preview.html", {"preview": preview, "editors": editors}
    )


@login_required
@require_POST
def job_new_convert(request: HttpRequest) -> JsonResponse:
    """The spec in the other editor's terms, when the page switches tabs:
    `to=yaml` answers `{"yaml": text}`, `to=form` answers `{"fields": {path: value}}`;
    what cannot be read answers `{"error": {"path", "message"}}`."""
    teams = _teams(request.user)
    if not teams:
        return JsonResponse({"error": {"path": "", "message": FORBIDDEN}}, status=403)
    try:
        if request.POST.get("to") == "yaml":
            document = JobSpecForm(request.POST, teams=teams).document()
            return JsonResponse({"yaml": dump_yaml(document)})
        document = YamlSpecForm(request.POST).document()
    except SpecDocumentError as exc:
        return JsonResponse({"error": {"path": exc.path, "message": exc.message}})
    values = JobSpecForm.initial_for(document)
    return JsonResponse({"fields": {path: values.get(path, "") for path in FIELDS}})


@login_required
@require_POST
def job_new_code(request: HttpRequest) -> JsonResponse:
    """Keep the code archive chosen on the page (`code_file`) for the form's `team`:
    `{"digest", "size"}` (201), or `{"error": message}` with the API's status for it."""
    teams = _teams(request.user)
    if not teams:
        return JsonResponse({"error": FORBIDDEN}, status=403)
    try:
        stored = receive_code_archive(
            request.FILES.get(CODE_FILE),
            team=request.POST.get("team", ""),
            teams=teams,
            user=request.user,
        )
    except CodeRefused as exc:
        return JsonResponse({"error": exc.message}, status=exc.status)
    archive = stored.archive
    return JsonResponse({"digest": archive.digest, "size": archive.size}, status=201)
