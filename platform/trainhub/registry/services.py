"""Exporting a succeeded job's model and registering it as the next version of a name.

The export itself is the runtime's (`ps_runtime.server.model_export`): the newest committed
checkpoint in the job's checkpoint directory, every shard's rows gathered, optimizer slots
left behind, zipped with a manifest that says which job, spec, metrics and code made it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from ps_runtime.server import checkpoint
from ps_runtime.server.model_export import export_model, pack_model
from trainhub.audit.services import record_change
from trainhub.jobs.choices import JobState
from trainhub.jobs.models import Job
from trainhub.telemetry.finals import final_values
from trainhub.telemetry.results import coordinator_result
from trainhub.tenancy.models import Team

from .models import ModelVersion, validate_model_name


class ModelExportError(ValueError):
    """A model cannot be exported or registered; `field` names what is at fault
    (`job`: its state or its checkpoints; `name`: the name asked for)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def model_root() -> Path:
    return Path(settings.MODEL_ROOT)


def model_file(version: ModelVersion) -> Path:
    """The registered zip of `version`."""
    return model_root() / version.path


def check_exportable(job: Job) -> None:
    """Raise ModelExportError (field `job`) unless the job succeeded and has a committed
    checkpoint."""
    if job.state != JobState.SUCCEEDED:
        raise ModelExportError(
            "job", f"Job {job.pk} is {job.state}: only a succeeded job exports a model."
        )
    later = (
        Job.objects.filter(checkpoints_of_id=job.checkpoints_of_id or job.pk, pk__gt=job.pk)
        .order_by("-pk")
        .values_list("pk", flat=True)
        .first()
    )
    if later is not None:
        raise ModelExportError(
            "job",
            f"Job {later} continued job {job.pk}'s checkpoints (a promoted trial): the "
            f"directory holds its model now; export job {later} instead.",
        )
    if checkpoint.latest(job.checkpoint_dir) is None:
        raise ModelExportError(
            "job",
            f"Job {job.pk} has no committed checkpoint in {job.checkpoint_dir}: its "
            "entrypoint never saved one (pass checkpoint_dir, or save at the end).",
        )


def job_manifest(job: Job, name: str | None, now: datetime) -> dict[str, Any]:
    """What a model's manifest says about where it came from."""
    environment = job.spec.get("environment")
    env_digest = None
    if environment:
        canonical = json.dumps(environment, sort_keys=True, separators=(",", ":"))
        env_digest = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    metrics = {
        row.name: row.finals[0].last for row in final_values([job.pk]) if row.finals[0] is not None
    }
    return {
        "name": name,
        "team": job.team.slug,
        "job_id": job.pk,
        "job_name": job.name,
        "spec": job.spec,
        "metrics": metrics,
        "result": coordinator_result(job.pk),
        "code_digest": job.spec.get("code") or None,
        "environment_digest": env_digest,
        "exported_at": now.isoformat(),
    }


def export_job_zip(*, job: Job, name: str | None, zip_path: Path, now: datetime) -> dict[str, Any]:
    """Export the job's model into the zip `zip_path` (unregistered); return its manifest.

    Raises:
        ModelExportError: the job did not succeed or has no committed checkpoint.
    """
    check_exportable(job)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=zip_path.parent))
    try:
        try:
            manifest = export_model(
                job.checkpoint_dir, str(work / "model"), job_manifest(job, name, now)
            )
        except FileNotFoundError as exc:  # pruned between the check and the export
            raise ModelExportError("job", f"Job {job.pk}: {exc}") from exc
        except (OSError, KeyError, TypeError, ValueError) as exc:  # files the job wrote
            raise ModelExportError(
                "job", f"Job {job.pk}'s checkpoint cannot be exported: {exc}"
            ) from exc
        pack_model(str(work / "model"), str(zip_path))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return manifest


def export_job_model(*, job: Job, user: User, name: Any, now: datetime) -> ModelVersion:
    """Export the job's model and register it as the next version of `name` in its team.

    Raises:
        ModelExportError: `name` is not a model name (field `name`), or the job did not
            succeed or has no committed checkpoint (field `job`). Nothing is registered.
    """
    if not isinstance(name, str):
        raise ModelExportError("name", "Enter a model name (a string).")
    try:
        validate_model_name(name)
    except ValidationError as exc:
        raise ModelExportError("name", exc.messages[0]) from None
    incoming = model_root() / ".incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    staged = incoming / f"{uuid.uuid4().hex}.zip"
    try:
        manifest = export_job_zip(job=job, name=name, zip_path=staged, now=now)
        size, digest = staged.stat().st_size, _sha256(staged)
        return _register(job, user, name, now, manifest, staged, size, digest)
    finally:
        staged.unlink(missing_ok=True)


@transaction.atomic
def _register(
    job: Job,
    user: User,
    name: str,
    now: datetime,
    manifest: dict[str, Any],
    staged: Path,
    size: int,
    digest: str,
) -> ModelVersion:
    # The team's row lock numbers concurrent registrations one after the other.
    Team.objects.select_for_update().filter(pk=job.team_id).first()
    latest = ModelVersion.objects.filter(team_id=job.team_id, name=name).aggregate(v=Max("version"))
    version = (latest["v"] or 0) + 1
    relative = Path(job.team.slug) / name / f"{version}.zip"
    target = model_root() / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, target)
    try:
        registered = ModelVersion.objects.create(
            team_id=job.team_id,
            name=name,
            version=version,
            job=job,
            created_by=user,
            created_at=now,
            manifest=manifest,
            size=size,
            digest=digest,
            path=str(relative),
        )
        record_change(
            actor=user,
            action="model.register",
            target=registered,
            before=None,
            after={"name": name, "version": version, "job": job.pk, "digest": digest},
            now=now,
        )
    except BaseException:  # no row, no file
        target.unlink(missing_ok=True)
        raise
    return registered


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()
