"""A code archive chosen on the submit page, kept by the service `POST /api/v1/code/` calls
(`trainhub.jobs.codearchives.store_code_archive`), refused with the API's messages.

The page uploads it as soon as it is chosen (`/jobs/new/code/`, with progress), or, without
JavaScript, with the form when it is submitted; either way the digest fills the spec's
`code`. The archive is kept for the team chosen in the form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.files.uploadedfile import UploadedFile

from ps_runtime.archives import UnsafeArchive
from trainhub.jobs.codearchives import (
    CodeArchiveTooLarge,
    StoredCode,
    max_bytes,
    store_code_archive,
)
from trainhub.tenancy.models import Team


class CodeRefused(Exception):
    """The archive was not kept; `message` says why, `status` is the API's for it."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def receive_code_archive(
    upload: UploadedFile | None,
    *,
    team: str,
    teams: Sequence[tuple[str, str]],
    user: Any,
) -> StoredCode:
    """Keep `upload` for `team`, one of `teams` (those the user may submit to).

    Raises:
        CodeRefused: no file, no such team of the user's, too large or unsafe; nothing
            was stored.
    """
    if upload is None:
        raise CodeRefused("Choose a .tar.gz or .zip file.")
    if team not in {slug for slug, _ in teams}:
        raise CodeRefused("Not uploaded: choose a team you may submit to first.")
    try:
        return store_code_archive(data=upload, team=Team.objects.get(slug=team), user=user)
    except CodeArchiveTooLarge:
        limit = max_bytes() / 2**20
        raise CodeRefused(f"The archive is larger than {limit:g} MiB.", status=413) from None
    except UnsafeArchive as exc:
        raise CodeRefused(f"Refused: {exc}.") from None
