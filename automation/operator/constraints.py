"""The local executor's package versions, as a pip constraints file for the operator's workspaces.

A repository Stack's workspace runs `pulumi install`: Pulumi.yaml names the pip toolchain, whose Python host runs
`python -m pip install -r requirements.txt` in the program's folder with the pod's environment (pulumi/pulumi
`sdk/python/toolchain/pip.go`, InstallDependencies: `pipCmd.Env = ActivateVirtualEnv(os.Environ(), ...)`).
infra/requirements.txt installs this project with pyproject.toml's version ranges, so without a pin a workspace
resolves the newest versions in those ranges, not the ones the machine that planned and fingerprinted the stacks
runs. pip reads every command-line option from a `PIP_<LONG_NAME>` environment variable (pip's "Configuration"
topic, "Environment Variables"), so `PIP_CONSTRAINT=<file>` is `pip install -c <file>` for each pip run, and a
constraint file restricts the version of whatever is installed without installing anything itself.

So the export writes every requirement of this project's distribution, followed recursively (extras and
environment markers evaluated as on this machine), pinned to its installed version. Reads installed metadata only.
"""

from __future__ import annotations

import hashlib
from importlib.metadata import PackageNotFoundError, distribution

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from fleet.errors import ModelplaneError

PROJECT = "modelplane-pulumi"  # pyproject.toml's [project] name
KEY = "constraints.txt"
MOUNT_DIR = "/var/run/modelplane/constraints"
FILE = f"{MOUNT_DIR}/{KEY}"
ENV = "PIP_CONSTRAINT"
HEADER = ("# modelplane operator export: the versions the local executor runs (every requirement of "
          f"{PROJECT}, recursively)\n")


class ConstraintsError(ModelplaneError, ValueError):
    pass


def installed_versions(project: str = PROJECT) -> dict[str, str]:
    """Canonical name -> installed version of every distribution `project` requires, recursively, as pip would
    install them here (each requirement's marker evaluated for the extras it was asked with). The project itself
    is left out: the workspace installs it from the cloned commit, by path."""
    root = canonicalize_name(project)
    seen: set[tuple[str, frozenset[str]]] = set()
    pending: list[tuple[str, frozenset[str]]] = [(root, frozenset())]
    versions: dict[str, str] = {}
    while pending:
        name, extras = pending.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            raise ConstraintsError(f"{name}: required by {project} but not installed on this machine, so the "
                                   "operator's workspaces cannot be pinned to the local executor's versions; "
                                   "reinstall the project (pip install -e .)") from None
        versions[name] = dist.version
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not any(
                    requirement.marker.evaluate({"extra": extra}) for extra in (sorted(extras) or [""])):
                continue
            pending.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    versions.pop(root, None)
    return dict(sorted(versions.items()))


def constraints_text(versions: dict[str, str]) -> str:
    return HEADER + "".join(f"{name}=={version}\n" for name, version in sorted(versions.items()))


def configmap_name(text: str) -> str:
    """Named by its content: a Stack's spec changes when the versions do (so PKO re-runs it with them), and a
    Stack exported earlier keeps the file it was exported with."""
    return f"modelplane-constraints-{hashlib.sha256(text.encode()).hexdigest()[:10]}"
