"""Users' code archives (`.tar.gz` or `.zip`): safety checks and read-only unpacking.

The control plane scans an upload before it stores it and the agent scans again before it
unpacks, with the same rules: no absolute paths, no `..`, no links pointing outside the
archive, no device files or FIFOs, no duplicate names, and bounded total size and member
count — checked from the archive's headers while reading it, never by extracting it.
Reading is bounded too: a tar's decompressed stream, its headers included, counts against
the unpacked-size limit, one member's headers (pax, GNU long names) are capped at
`MAX_HEADER_BYTES`, and a zip's central directory is measured before it is read.
Symlinks are resolved component by component, through the archive's other links.
Unpacked files are 0444 (0555 when executable) and directories 0555.

The bounds are in `limits`, the checks in `scanning` (reading members through `tars` and
`zips`, links through `links`), unpacking in `extraction`, digests and copies in `digests`.
"""

from __future__ import annotations

from .digests import DIGEST_PREFIX, TooLarge, copy_hashing, is_digest, sha256_file
from .extraction import extract, make_writable, read_member
from .members import UnsafeArchive
from .scanning import scan

__all__ = [
    "DIGEST_PREFIX",
    "TooLarge",
    "UnsafeArchive",
    "copy_hashing",
    "extract",
    "is_digest",
    "make_writable",
    "read_member",
    "scan",
    "sha256_file",
]
