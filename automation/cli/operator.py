"""`operator export`: the Pulumi Kubernetes Operator objects that run every desired stack."""

from __future__ import annotations

import click

from automation.cli.base import (
    EXIT_INVALID,
    cli,
    fresh_option,
    gateway_host,
    load,
    paths_option,
    record_for_plan,
    state_option,
)


@cli.group()
def operator() -> None:
    """Run the fleet's stacks on the Pulumi Kubernetes Operator (v2) in the control-plane cluster."""


@operator.command("export")
@paths_option
@click.option("--out", required=True, metavar="DIR", help="Folder for _operator.yaml and one <stack>.yaml per stack.")
@click.option("--backend", required=True, metavar="URL",
              help="The stacks' Pulumi backend: s3://, gs://, azblob:// or a Pulumi Cloud URL.")
@click.option("--git-url", "git_url", required=True, metavar="URL",
              help="This project's repository (with the fleet's manifests in it): platform and gateway stacks run "
                   "its Pulumi.yaml.")
@click.option("--git-ref", "git_ref", default="main", show_default=True, metavar="REF",
              help="A branch, a tag or a 40-hex commit: the Stacks are pinned to the commit it resolves to now "
                   "(git ls-remote), so a later commit re-runs only the stacks an export changes.")
@click.option("--git-auth", "git_auth", default=None, metavar="MODE=SECRET",
              help="A private repository: accessToken=SECRET (key accessToken), sshAuth=SECRET (key sshPrivateKey) "
                   "or basicAuth=SECRET (keys username, password), a Secret in --namespace.")
@click.option("--repo-dir", "repo_dir", default=".", show_default=True, metavar="DIR",
              help="Where Pulumi.yaml is in the repository.")
@click.option("--fleet-dir", "fleet_dir", default="fleet", show_default=True, metavar="DIR",
              help="The fleet's manifests in the repository, relative to --repo-dir (the platform program's "
                   "modelplane:fleet).")
@click.option("--namespace", default="modelplane-stacks", show_default=True,
              help="The namespace of the Stack and Program objects in the control-plane cluster.")
@click.option("--image", default=None, metavar="IMAGE", help="The workspaces' Pulumi image (default: a pinned "
                                                             "pulumi/pulumi nonroot image).")
@click.option("--secret", "secrets", multiple=True, metavar="NAME",
              help="A Secret in --namespace whose keys become every workspace's environment (cloud credentials, "
                   "PULUMI_ACCESS_TOKEN or PULUMI_CONFIG_PASSPHRASE). Repeatable; values are never read.")
@click.option("--gcp-credentials", "gcp_credentials", default=None, metavar="SECRET[:KEY]",
              help="GKE clusters: a Secret in --namespace whose KEY (default credentials.json) is a GCP service "
                   "account key, mounted into every workspace as GOOGLE_APPLICATION_CREDENTIALS.")
@click.option("--nebius-credentials", "nebius_credentials", default=None, metavar="SECRET[:KEY]",
              help="Nebius clusters: a Secret in --namespace whose KEY (default credentials.json) is a service "
                   "account's authorized key, mounted into every workspace (with an --image holding the nebius CLI).")
@click.option("--organization", default="organization", show_default=True,
              help="The backend's organization (Pulumi Cloud: yours; DIY backends: organization).")
@click.option("--fleet", "fleet_name", default=None, envvar="MODELPLANE_FLEET", metavar="NAME",
              help="Several fleets on one backend: stacks are named <NAME>_<stack> there.")
@click.option("--control-plane", "control_plane", default=None, metavar="CLUSTER",
              help="The InferenceCluster hosting the fleet gateway (and the operator).")
@state_option
@fresh_option
def operator_export(paths, out, backend, git_url, git_ref, git_auth, repo_dir, fleet_dir, namespace, image, secrets,
                    gcp_credentials, nebius_credentials, organization, fleet_name, control_plane, state, fresh) -> None:
    """Write the Pulumi Kubernetes Operator objects that run every desired stack (nothing is applied)."""
    from pathlib import Path

    from automation.operator.git_source import pinned_commit
    from automation.operator.export import PULUMI_IMAGE, ExportError, ExportOptions, export, write
    from automation.operator.validation import problems
    from automation.planning.stacks import Host, desired_state

    loaded = load(paths)
    host = gateway_host(loaded.fleet, control_plane)
    applied = record_for_plan(state, backend, fleet_name, "local", "", fresh)
    desired = desired_state(loaded.fleet, applied.placements(), Host(host), gateways=applied.gateways())
    if desired.problems:
        for line in desired.problems:
            click.echo(line, err=True)
        click.echo(f"{len(desired.problems)} invalid object(s); nothing was written", err=True)
        raise SystemExit(EXIT_INVALID)
    try:
        mode, _, secret = (git_auth or "").partition("=")
        if git_auth is not None and not (mode and secret):
            raise ExportError(f"--git-auth {git_auth!r}: expected MODE=SECRET, e.g. accessToken=github-token")
        options = ExportOptions(backend=backend, git_url=git_url,
                                git_ref=pinned_commit(git_url, git_ref) if git_url else git_ref, repo_dir=repo_dir,
                                fleet_dir=fleet_dir, namespace=namespace, image=image or PULUMI_IMAGE,
                                secrets=tuple(secrets), organization=organization, fleet_name=fleet_name,
                                git_auth=(mode, secret) if git_auth else None,
                                gcp_credentials=_credential_file("--gcp-credentials", gcp_credentials),
                                nebius_credentials=_credential_file("--nebius-credentials", nebius_credentials))
        files = export(desired, options)
        found = problems(files)
        if found:
            for line in found:
                click.echo(line, err=True)
            click.echo(f"{len(found)} invalid operator object(s); nothing was written", err=True)
            raise SystemExit(EXIT_INVALID)
        count = write(files, Path(out))
    except (ExportError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_INVALID) from None
    click.echo(f"wrote {count} operator objects for {len(files) - 1} stacks to {out} (every object checked against "
               "the operator's CRDs); apply them with `kubectl apply --server-side -f` to the control-plane cluster")



def _credential_file(flag: str, given: str | None) -> tuple[str, str] | None:
    """SECRET[:KEY] as (Secret, key); the key defaults to credentials.json."""
    from automation.operator.export import ExportError

    if given is None:
        return None
    secret, colon, key = given.partition(":")
    if not secret or (colon and not key):
        raise ExportError(f"{flag} {given!r}: expected SECRET or SECRET:KEY, e.g. gcp-workspace:credentials.json")
    return secret, key or "credentials.json"
