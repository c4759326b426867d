"""The commit the operator's workspaces clone, resolved where `modelplane` runs.

A platform Stack given a branch re-runs every cluster's program whenever the branch moves, touched or not.
So a branch or tag is resolved to its commit when the operator's objects are made (`git ls-remote`, with the
user's own git credentials), and a Stack is re-applied, with a newer commit, only when its stack changed.
Nothing here prints a URL's credentials.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
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


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=TIMEOUT_SECONDS,
                          env={**os.environ, "GIT_TERMINAL_PROMPT": "0"}, check=False)


def local_tree_problem(commit: str, fleet_path: str | Path, repo_dir: str = ".") -> str | None:
    """Why the operator would not run what this machine fingerprints, or None.

    The plan (and every Stack's fingerprint) is made from the manifests here, but the operator's platform and
    gateway workspaces clone `commit`: the two are the same only when this tree is at `commit` with nothing
    uncommitted (or untracked) in the project the workspaces fetch (`repo_dir`)."""
    start = Path(fleet_path).resolve()
    folder = start if start.is_dir() else start.parent
    try:
        top = _git(folder, "rev-parse", "--show-toplevel")
        if top.returncode != 0:
            return (f"{fleet_path} is not in a git checkout: the operator runs commit {commit[:12]} of gitUrl, and "
                    "nothing shows that it holds these manifests; run from a checkout of that commit")
        root = Path(top.stdout.strip())
        head = _git(root, "rev-parse", "HEAD").stdout.strip()
        if head != commit:
            return (f"this checkout ({root}) is at {head[:12] or 'no commit'}, but gitRef resolves to {commit[:12]}: the "
                    "operator would run that commit's program and manifests, not the ones planned here; check out "
                    "that commit, or push this one and point gitRef at it")
        status = _git(root, "status", "--porcelain", "--untracked-files=all", "--", repo_dir)
    except FileNotFoundError:
        return "git is not installed, so this tree cannot be compared with the commit the operator runs"
    except subprocess.TimeoutExpired:
        return f"git did not answer in {TIMEOUT_SECONDS} s in {folder}"
    if status.returncode != 0:
        return f"cannot read {root}'s status: {' '.join(status.stderr.split())[:200]}"
    changed = [line[3:] for line in status.stdout.splitlines() if line.strip()]
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        return (f"{len(changed)} uncommitted change(s) in {root} ({shown}): the operator runs commit {commit[:12]} "
                "without them; commit and push them, then point gitRef at that commit")
    return None
