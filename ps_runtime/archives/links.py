"""Checking an archive's links: hard links name a file in it, and symlinks, resolved
component by component through the archive's other links, stay under its root."""

from __future__ import annotations

from .limits import MAX_LINK_DEPTH
from .members import Member, UnsafeArchive


def check_links(links: list[Member], kinds: dict[str, str]) -> None:
    symlinks = {link.name: link.link for link in links if link.kind == "symlink"}
    resolved: dict[str, list[str]] = {}
    for link in links:
        if link.kind == "hardlink":
            if kinds.get(link.link) != "file":
                raise UnsafeArchive(
                    f"hard link {link.name!r} names {link.link!r}, not a file in it"
                )
        else:
            _resolve_link(link.name, symlinks, resolved, depth=0)


def _resolve_link(
    name: str, symlinks: dict[str, str], resolved: dict[str, list[str]], depth: int
) -> list[str]:
    """Where the symlink `name` leads, as path components under the archive's root.

    Each component of its target is looked up in turn, and a component that is another
    link of the archive is replaced by where that link leads, as the kernel will do once
    the links are on disk: `a -> .` then `b -> a/..` leaves the root although `a/..`
    alone does not.

    Raises:
        UnsafeArchive: the link (or one it goes through) leads outside the root, or links
            nest deeper than `MAX_LINK_DEPTH` (a loop does).
    """
    if name in resolved:
        return resolved[name]
    target = symlinks[name]
    if depth > MAX_LINK_DEPTH:
        raise UnsafeArchive(
            f"link {name!r} goes through more than {MAX_LINK_DEPTH} links (or a loop)"
        )
    outside = UnsafeArchive(f"link {name!r} points outside the archive ({target!r})")
    if not target or target.startswith("/") or "\x00" in target:
        raise outside
    path = name.split("/")[:-1]
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not path:
                raise outside
            path.pop()
            continue
        path.append(part)
        through = "/".join(path)
        if through in symlinks:
            path = list(_resolve_link(through, symlinks, resolved, depth + 1))
    resolved[name] = path
    return path
