"""The commit the operator's workspaces clone, resolved where `modelplane` runs.

A platform Stack given a branch re-runs every cluster's program whenever the branch moves, touched or not.
So a branch or tag is resolved to its commit when the operator's objects are made (`git ls-remote`, with the
user's own git credentials), and a Stack is re-applied, with a newer commit, only when its stack changed.
Nothing here prints a URL's credentials.
"""

from __future__ import annotations

import os
import subprocess
from urllib.parse import urlsplit, urlunsplit

from automation.operator.export import COMMIT, ExportError

TIMEOUT_SECONDS = 60


class GitRefError(ExportError):
    pass


def redacted(url: str) -> str:
    """The URL without the user and password it may carry (https://token@host/...)."""
    parts = urlsplit(url)
    if not parts.username and not parts.password:
        return url
    host = parts.hostname or ""
    return urlunsplit((parts.scheme, f"***@{host}" + (f":{parts.port}" if parts.port else ""), parts.path,
                       parts.query, parts.fragment))


def pinned_commit(url: str, ref: str) -> str:
    """`ref` as a 40-hex commit: itself when it is one, else the commit the remote's branch or tag points at."""
    if COMMIT.match(ref):
        return ref
    wanted = [ref] if ref.startswith("refs/") else [f"refs/heads/{ref}", f"refs/tags/{ref}", f"refs/tags/{ref}^{{}}"]
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}  # never wait on a password prompt
    try:
        result = subprocess.run(["git", "ls-remote", "--", url, *wanted], capture_output=True, text=True,
                                timeout=TIMEOUT_SECONDS, env=env, check=False)
    except FileNotFoundError:
        raise GitRefError(f"gitRef {ref!r}: git is not installed, so the branch cannot be resolved; give a 40-hex "
                          "commit") from None
    except subprocess.TimeoutExpired:
        raise GitRefError(f"gitRef {ref!r}: {redacted(url)} did not answer in {TIMEOUT_SECONDS} s; give a 40-hex "
                          "commit") from None
    if result.returncode != 0:
        reason = " ".join(result.stderr.replace(url, redacted(url)).split())[:300] or f"git exit {result.returncode}"
        raise GitRefError(f"gitRef {ref!r}: cannot read {redacted(url)} ({reason}); give a 40-hex commit")
    found = {name: sha for sha, name in (line.split("\t", 1) for line in result.stdout.splitlines() if "\t" in line)}
    # a branch; else an annotated tag's commit (its `^{}` line), else a lightweight tag's
    for name in (wanted[0], *reversed(wanted[1:])):
        if name in found and COMMIT.match(found[name]):
            return found[name]
    raise GitRefError(f"gitRef {ref!r}: no such branch or tag in {redacted(url)}; give a branch, a tag or a 40-hex "
                      "commit")
