"""Where each secret a stack reads comes from, named and never shown: a Secret manifest given with -f (its file and
line), an environment variable, a file under --secrets-dir, or, for an Existing cluster's kubeconfig, a file the
runner is given (`kubeconfig_files`: --kubeconfig CLUSTER=PATH, $MODELPLANE_KUBECONFIG_<CLUSTER>, the state
folder's kubeconfigs/<name>).

The platform program reads a kubeconfig from the fleet's secret store before the file it is given
(automation/execution/programs.py `stored_kubeconfig`), so a Secret manifest in the fleet's files (a pull request)
would silently win over the file the one running the command gives: the runner refuses the two
(`replaced_kubeconfigs`), as loading the fleet refuses a manifest that replaces a variable or a --secrets-dir file
(fleet/validate.py). `review` and `plan --against -o markdown` list each changed stack's secrets with where they
come from (`changed_sources`); whether a manifest gives a secret is part of the stack's fingerprint
(automation/planning/stacks.py `from_manifests`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping

from automation.planning.payloads import object_secrets
from automation.planning.stacks import Change, StackChange, StackSpec, cluster_secrets
from fleet.secrets import SecretRef, kubeconfig_ref
from fleet.stack_id import StackId, StackKind

if TYPE_CHECKING:
    from fleet.validate import Fleet

NOT_GIVEN = "not given here"


def kubeconfig_env(cluster: str) -> str:
    return "MODELPLANE_KUBECONFIG_" + cluster.upper().replace("-", "_").replace(".", "_")


def kubeconfig_files(cluster, given: Mapping[str, str], root: Path | None) -> list[tuple[str, str]]:
    """The kubeconfig files the runner is given for an Existing InferenceCluster, first to last, as (how it was
    given, path): the first that is a file is read. A place that may hold more kubeconfigs is added here, and so
    both read and checked against the manifests."""
    out = []
    if given.get(cluster.name):
        out.append((f"--kubeconfig {cluster.name}={given[cluster.name]}", given[cluster.name]))
    variable = kubeconfig_env(cluster.name)
    if os.environ.get(variable):
        out.append((f"${variable}", os.environ[variable]))
    if root is not None and (stored := root / "kubeconfigs" / cluster.existing_block.secretRef.name).is_file():
        out.append((str(stored), str(stored)))
    if root is not None and (local := root / "local" / cluster.name / "kubeconfig").is_file():
        out.append((f"the local fleet ({local})", str(local)))  # `modelplane local up`
    return out


def replaced_kubeconfigs(fleet: Fleet, given: Mapping[str, str], root: Path | None) -> list[str]:
    """One line per Existing cluster whose kubeconfig both a Secret manifest and a file the runner is given give:
    the manifest would win, unsaid. Names the manifest's file and line and both sources, never a value."""
    lines = []
    for ic in fleet.of("InferenceCluster"):
        ref = kubeconfig_ref(ic)
        place = fleet.secrets.manifest_of(ref) if ref is not None else None
        files = kubeconfig_files(ic, given, root) if place is not None else []
        if files:
            lines.append(f"{place}: Secret {ref} gives InferenceCluster/{ic.name}'s kubeconfig, which {files[0][0]} "
                         "gives too: a Secret in the manifests may not replace the kubeconfig the one running the "
                         "command gives; remove one of the two")
    return lines


def _runner_source(fleet: Fleet, ref: SecretRef, files: list[tuple[str, str]]) -> str:
    """Where the value comes from when no manifest gives it: the environment, --secrets-dir, a kubeconfig file."""
    return fleet.secrets.given_elsewhere(ref) or (files[0][0] if files else NOT_GIVEN)


def secret_sources(fleet: Fleet, refs: Iterable[SecretRef], files: list[tuple[str, str]],
                   base_manifests: list[str] | None = None) -> list[str]:
    """Each secret with where its value comes from; `base_manifests`: the secrets the base's manifests give, to
    say where it came from when that differs (a manifest of the base, or what gives it here)."""
    lines = []
    for ref in dict.fromkeys(refs):
        place = fleet.secrets.manifest_of(ref)
        now = f"Secret manifest {place}" if place is not None else _runner_source(fleet, ref, files)
        if place is not None and files:
            now += f", and {files[0][0]} (the runner refuses the two)"
        line = f"Secret {ref}: {now}"
        if base_manifests is not None and (str(ref) in base_manifests) != (place is not None):
            line += " (base: " + ("a Secret manifest" if place is None else _runner_source(fleet, ref, files)) + ")"
        lines.append(line)
    return lines


def changed_sources(fleet: Fleet, specs: Mapping[str, StackSpec], changed: Iterable[StackChange],
                    base_manifests: list[str], given: Mapping[str, str] | None = None,
                    root: Path | None = None) -> dict[str, list[str]]:
    """For each created or updated stack that reads secrets, each of them with where it comes from (and, for an
    update, where it came from in the base when that differs). Never a value."""
    clusters = {ic.name: ic for ic in fleet.of("InferenceCluster")}
    by_cluster = cluster_secrets(fleet)
    out = {}
    for change in changed:
        spec = specs.get(change.name)
        if spec is None or change.change not in (Change.create, Change.update):
            continue
        id = StackId.parse(change.name)
        if id.kind == StackKind.platform and id.cluster in clusters:
            refs, ic = by_cluster[str(id.cluster)], clusters[str(id.cluster)]
            files = kubeconfig_files(ic, given or {}, root) if refs else []
        else:
            refs, files = object_secrets(spec.objects), []
        lines = secret_sources(fleet, refs, files, base_manifests if change.change == Change.update else None)
        if lines:
            out[change.name] = lines
    return out
