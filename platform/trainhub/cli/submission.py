"""`trainhub submit`: a spec file (and `--code`) to a job, or with `--dry-run` to the
scheduler's answer on whether it would start now."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from trainhub.jobs.specyaml import MAX_SPEC_BYTES, SpecYamlError, load_spec_yaml

from . import codepack
from .api_client import ApiClient, signed_in
from .errors import EXIT_USAGE, CommandError
from .output import print_json


def read_document(args: argparse.Namespace) -> tuple[ApiClient, dict[str, Any]]:
    """The spec file of `args.spec` (with `--team` and `--code` applied) and a signed-in
    client; sent as written: the server answers with errors naming the fields."""
    try:
        with args.spec.open("rb") as f:
            text = f.read(MAX_SPEC_BYTES + 1)  # one byte over is enough to refuse it
    except OSError as exc:
        raise CommandError(f"cannot read {args.spec}: {exc.strerror}", EXIT_USAGE) from exc
    try:
        document = load_spec_yaml(text)
    except SpecYamlError as exc:
        raise CommandError(f"{args.spec}: {exc.message}", EXIT_USAGE) from exc
    if not isinstance(document, dict):
        raise CommandError(f"{args.spec} must hold a mapping (the job spec)", EXIT_USAGE)
    if args.team:
        document["team"] = args.team
    client = signed_in()
    if args.code is not None:
        document["code"] = _upload_code(client, args.code, document.get("team"))
    return client, document


def submit(args: argparse.Namespace) -> None:
    client, document = read_document(args)
    # Sent as written: the server validates it and answers with errors naming the fields.
    if args.dry_run:
        _print_preview(client.post("/jobs/?dry_run=true", document), json_out=args.json)
        return
    job = client.post("/jobs/", document)
    if args.json:
        print_json(job)
    else:
        print(f"submitted job {job['id']} ({job['name']}, team {job['team']}): {job['state']}")
        print(f"  watch it at {client.url}/jobs/{job['id']}/")


def _print_preview(preview: dict[str, Any], *, json_out: bool) -> None:
    """What `POST jobs/?dry_run=true` answered, for people or (`--json`) scripts."""
    if json_out:
        print_json(preview)
        return
    position = f"queue position {preview['position']}"
    if preview["fits_now"]:
        print(f"would start now ({position}); nothing was submitted")
        return
    start = preview["estimated_start"] or "unknown (it depends on when other jobs finish)"
    print(f"would wait ({position}): {preview['reason']}")
    print(f"estimated start: {start}; nothing was submitted")


def _upload_code(client: ApiClient, root: Path, team: Any) -> str:
    """Pack and upload `root`; the digest the spec's `code` names."""
    if not root.is_dir():
        raise CommandError(f"--code {root}: not a directory", EXIT_USAGE)
    with tempfile.TemporaryFile() as archive:
        count = codepack.pack(root, archive)
        archive.seek(0)
        fields = {"team": team} if isinstance(team, str) else {}
        stored = client.upload("/code/", archive, f"{root.resolve().name}.tar.gz", **fields)
    print(
        f"uploaded {root} ({count} files, {stored['size']} bytes) as {stored['digest']}",
        file=sys.stderr,
    )
    return str(stored["digest"])
