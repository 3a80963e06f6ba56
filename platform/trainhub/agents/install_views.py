"""`/agent/install.sh` and `/agent/dist/`: what a new node downloads (issue 13, item 1).

Neither needs a sign-in: the script and the wheel hold no secret (the operator gives the
enrollment token to the script, from a file or standard input), and a node has no
credential yet. The script carries the sha256 of the wheel served beside it and installs
no other (issue 26).
"""

from __future__ import annotations

import shlex

from django.conf import settings
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.template.loader import render_to_string
from django.utils.html import escape
from django.views.decorators.http import require_safe

from trainhub.nodes.install import public_server_url

from .dist import WheelUnavailable, runtime_version, runtime_wheel, wheel_name, wheel_sha256

DIST_PATH = "/agent/dist/"
SCRIPT_CONTENT_TYPE = "text/plain; charset=utf-8"  # readable in a browser before piping


@require_safe
def install_script(request: HttpRequest) -> HttpResponse:
    """The POSIX sh installer, with this server's URL, its runtime wheel's name and the
    wheel's sha256 (the wheel is built first when needed)."""
    try:
        wheel = runtime_wheel(settings.AGENT_DIST_DIR)
    except WheelUnavailable as exc:
        # Still a script, which says why when run without `curl -f`.
        message = shlex.quote(f"trainhub-agent install: error: {exc}")
        failing = f"#!/bin/sh\nprintf '%s\\n' {message} >&2\nexit 1\n"
        return HttpResponse(failing, status=503, content_type=SCRIPT_CONTENT_TYPE)
    server = public_server_url(request)
    script = render_to_string(
        "agents/install.sh",
        {
            "server": server,
            "version": runtime_version(),
            "server_q": shlex.quote(server),
            "wheel_q": shlex.quote(wheel.name),
            "wheel_sha256_q": shlex.quote(wheel_sha256(wheel)),
            "dist_path_q": shlex.quote(DIST_PATH),
        },
    )
    response = HttpResponse(script, content_type=SCRIPT_CONTENT_TYPE)
    response["Cache-Control"] = "no-cache"
    return response


@require_safe
def dist_index(request: HttpRequest) -> HttpResponse:
    """A simple index (PEP 503 style) listing the one wheel: usable with `pip --find-links`."""
    name = escape(wheel_name())
    return HttpResponse(
        f"<!DOCTYPE html><html><head><title>trainhub-runtime</title></head><body>\n"
        f'<a href="{name}">{name}</a>\n</body></html>\n'
    )


@require_safe
def dist_wheel(request: HttpRequest, filename: str) -> HttpResponseBase:
    """The runtime wheel this server runs (built on first request from a source tree)."""
    if filename != wheel_name():
        raise Http404(f"this server serves {wheel_name()} only")
    try:
        path = runtime_wheel(settings.AGENT_DIST_DIR)
    except WheelUnavailable as exc:
        return HttpResponse(f"{exc}\n", status=503, content_type="text/plain; charset=utf-8")
    return FileResponse(
        path.open("rb"),
        as_attachment=True,
        filename=path.name,
        content_type="application/octet-stream",
    )
