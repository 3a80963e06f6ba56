"""The bounds an archive is held to while it is scanned and unpacked."""

from __future__ import annotations

MAX_MEMBERS = 100_000
MAX_NAME_BYTES = 4096  # PATH_MAX: a longer name could not be unpacked anyway
MAX_LINK_TARGET_BYTES = 4096
# All member names and link targets together (a real tree of 100,000 files needs ~10 MiB).
MAX_NAMES_BYTES = 32 * 1024 * 1024
# The headers read before one tar member (pax, GNU long name/link, sparse maps).
MAX_HEADER_BYTES = 1024 * 1024
# A tar's global pax headers (`git archive` writes one, of 52 bytes).
MAX_GLOBAL_PAX_BYTES = 64 * 1024
MAX_ZIP_DIRECTORY_BYTES = 32 * 1024 * 1024
MAX_LINK_DEPTH = 40  # links followed while resolving one link (Linux's MAXSYMLINKS)
CHUNK = 1024 * 1024  # bytes read or written at a time
