"""`trainhub submit --code DIR`: pack a directory as a reproducible `.tar.gz`.

Files matching `DIR/.trainhubignore` are left out. Its lines are gitignore-like: `#`
comments, `name` matches at any depth, a pattern with a `/` inside is anchored at DIR,
a trailing `/` matches directories only, `*`, `?` and `[...]` are globs, `!pattern`
takes a path back. `.git/`, `__pycache__/` and `*.pyc` are always left out. The same
files give the same bytes (sorted, zero times and owners), so the same digest: an
unchanged directory is stored once.
"""

from __future__ import annotations

import fnmatch
import gzip
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

IGNORE_FILE = ".trainhubignore"
ALWAYS_IGNORED = (".git/", "__pycache__/", "*.pyc")


@dataclass(frozen=True)
class Rule:
    pattern: str
    negated: bool
    dir_only: bool
    anchored: bool

    def matches(self, path: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.anchored:
            return fnmatch.fnmatchcase(path, self.pattern)
        return fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], self.pattern)


def parse_rules(lines: list[str]) -> list[Rule]:
    rules = []
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        line = line.removeprefix("!")
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        while line.startswith("**/"):
            line = line[3:]
        anchored = "/" in line
        line = line.lstrip("/")
        if line:
            rules.append(Rule(line, negated, dir_only, anchored))
    return rules


def load_rules(root: Path) -> list[Rule]:
    ignore = root / IGNORE_FILE
    lines = list(ALWAYS_IGNORED)
    if ignore.is_file():
        lines += ignore.read_text().splitlines()
    return parse_rules(lines)


def ignored(path: str, is_dir: bool, rules: list[Rule]) -> bool:
    """Whether `path` (relative, '/'-separated) is left out; the last matching rule wins."""
    verdict = False
    for rule in rules:
        if rule.matches(path, is_dir):
            verdict = not rule.negated
    return verdict


def included_files(root: Path) -> list[str]:
    """The relative paths packed from `root`, sorted (directories by their files)."""
    rules = load_rules(root)
    kept: list[str] = []
    for current, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(current, root).replace(os.sep, "/")
        prefix = "" if rel_dir == "." else rel_dir + "/"
        dirs[:] = sorted(
            d
            for d in dirs
            if os.path.islink(os.path.join(current, d)) or not ignored(prefix + d, True, rules)
        )
        for name in dirs + sorted(files):
            full = os.path.join(current, name)
            if name in dirs and not os.path.islink(full):
                continue
            if not ignored(prefix + name, False, rules):
                kept.append(prefix + name)
    return sorted(kept)


def pack(root: Path, out: IO[bytes]) -> int:
    """Write `root`'s kept files to `out` as a .tar.gz; how many went in."""
    names = included_files(root)
    with (
        gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name in names:
            info = tar.gettarinfo(str(root / name), arcname=name)
            if not (info.isreg() or info.issym()):
                continue  # sockets, FIFOs and devices are no code
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if info.mode & 0o111 else 0o644
            if info.isreg():
                with (root / name).open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return len(names)
