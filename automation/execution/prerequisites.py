"""What a run of the local executor needs on this host before any stack runs, one line each with where to give it
(never a value): the Pulumi CLI, the passphrase of a self-managed backend, Existing clusters' kubeconfigs, GKE
clusters' projects, Secrets' values. The preflight (automation/road/preflight.py) asks here for every road."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from automation.execution.runner import INSTALL_HINT, AutomationError, CLIMissing
from automation.planning.secret_sources import kubeconfig_env, kubeconfig_files, replaced_kubeconfigs
from automation.record.backend import default_backend
from fleet.stack_id import StackId

if TYPE_CHECKING:
    from fleet.validate import Fleet


def is_pulumi_cloud(backend: str) -> bool:
    """Pulumi Cloud (https://api.pulumi.com) or a self-hosted Pulumi service: an http(s) URL. Everything else
    (file://, s3://, gs://, azblob://) is a DIY backend, whose secrets need a passphrase."""
    return backend.startswith(("https://", "http://"))


CLI_MISSING = f"the Pulumi CLI is not installed: {INSTALL_HINT}"


def cli_missing() -> bool:
    """No Pulumi CLI to run. Where none is on PATH, the real engine `make toolchain` built is put there first
    (automation/local/toolchain.py `activate`): every road that runs stacks asks here."""
    from automation.local.toolchain import ToolchainMissing, activate

    try:
        activate()
    except ToolchainMissing as exc:
        raise CLIMissing(str(exc)) from None
    return shutil.which("pulumi") is None and not os.environ.get("PULUMI_HOME")


PASSPHRASE_MISSING = ("set PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE): stack secrets "
                      "(kubeconfigs, tokens) are encrypted with it")


def passphrase_missing(backend: str) -> bool:
    return not is_pulumi_cloud(backend) and not (os.environ.get("PULUMI_CONFIG_PASSPHRASE")
                                                 or os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE"))


def check_passphrase(backend: str) -> None:
    if passphrase_missing(backend):
        raise CLIMissing(PASSPHRASE_MISSING)


def missing_credentials(fleet: Fleet, given: Mapping[str, str], root: Path, backend: str | None, stacks: list[str],
                        specs: Mapping[str, Any], config: Mapping[str, str] | None = None,
                        found: Mapping[str, str] | None = None) -> list[str]:
    """Everything a real run of `stacks` needs that is not here, one line each with where to give it (never a
    value): the passphrase of a self-managed backend, Existing clusters' kubeconfigs, GKE clusters' projects (none
    in the manifest or in `config`, the stack config given), Secrets' values. `specs`: the specs of the stacks
    that create or update (their rendered objects name the Secrets). `found`: the kubeconfig files, when already
    asked for (`existing_kubeconfigs`)."""
    from automation.execution.programs import missing_secrets
    from automation.planning.needs import missing_projects

    out = [PASSPHRASE_MISSING] if passphrase_missing(backend or default_backend(root)) else []
    found = existing_kubeconfigs(fleet, given, root) if found is None else found
    out += missing_kubeconfigs(fleet, found, stacks, root)
    out += missing_projects(fleet, [name for name in stacks if name in specs], config)
    out += [line for spec in specs.values() for line in missing_secrets(spec, fleet)]
    return out


def existing_kubeconfigs(fleet: Fleet, given: Mapping[str, str], root: Path) -> dict[str, str]:
    """The kubeconfig file of every Existing cluster: `--kubeconfig CLUSTER=PATH`, else $MODELPLANE_KUBECONFIG_<CLUSTER>,
    else `<state dir>/kubeconfigs/<existing.secretRef.name>`, else the local fleet's (`modelplane local up`:
    `<state dir>/local/<cluster>/kubeconfig`) (secret_sources.kubeconfig_files). Absolute paths;
    missing ones are left out. Refused (AutomationError) where a Secret manifest gives one too: the program would
    read the manifest's instead, unsaid. The CLI's runner and the portal's both ask here before they run."""
    refused = replaced_kubeconfigs(fleet, given, root)
    if refused:
        raise AutomationError("; ".join(refused))
    out = {}
    for ic in fleet.of("InferenceCluster"):
        if ic.spec.cluster.source != "Existing":
            continue
        candidates = [path for _, path in kubeconfig_files(ic, given, root)]
        found = next((c for c in candidates if c and Path(c).expanduser().is_file()), None)
        if found:
            out[ic.name] = str(Path(found).expanduser().resolve())
    return out


def missing_kubeconfigs(fleet: Fleet, found: Mapping[str, str], stacks: list[str], root: Path) -> list[str]:
    """One line per Existing cluster whose platform stack would run without a kubeconfig."""
    from fleet.secrets import kubeconfig_ref

    lines = []
    for ic in fleet.of("InferenceCluster"):
        ref = kubeconfig_ref(ic)
        if ref is None or str(StackId.platform(ic.name)) not in stacks or ic.name in found or fleet.secrets.get(ref):
            continue
        lines.append(f"InferenceCluster/{ic.name} is Existing: give its kubeconfig with --kubeconfig {ic.name}=PATH, "
                     f"${kubeconfig_env(ic.name)}=PATH, the file {root / 'kubeconfigs' / ic.existing_block.secretRef.name}, "
                     f"the Secret: {fleet.secrets.where_to_put(ref)}, or start a local fleet for it: "
                     "`modelplane local up` (docs/local-fleet.md)")
    return lines


