"""What a command that runs stacks was asked (`StackRun`), and the options it parses for that: `--kubeconfig
CLUSTER=PATH`, `--config` and `--config-file`. Each bad value is one line naming it, and exit 2."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from automation.road.executor import ExecutorOptions
    from automation.execution.runner import Operation


def kubeconfig_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    """`--kubeconfig CLUSTER=PATH`, each: cluster -> path."""
    out: dict[str, str] = {}
    for pair in pairs:
        cluster, sep, path = pair.partition("=")
        if not sep or not cluster or not path:
            click.echo(f"error: --kubeconfig {pair!r}: expected CLUSTER=PATH", err=True)
            raise SystemExit(2)
        out[cluster] = path
    return out


@dataclass(frozen=True)
class StackRun:
    """What a command that runs stacks was asked: decided once from its options, read by every step below."""

    operation: Operation
    paths: tuple[str, ...]
    output: str = "table"
    backend: str | None = None
    parallel: int = 2
    control_plane: str | None = None
    kubeconfig: tuple[str, ...] = ()
    unprotect: bool = False
    prune: bool = False
    destroy_clusters: bool = False
    force: tuple[str, ...] = ()
    refresh: bool = False
    check: bool = True
    fleet_name: str | None = None
    state: str = ".modelplane"
    executor: str = "local"
    operator_settings: str = "modelplane-operator.yaml"
    config: dict[str, str] | None = None
    verbose: bool = False  # list every deployability violation, those that follow from a failed program too
    forget: tuple[str, ...] = ()  # `up --prune --forget CLUSTER`: clusters gone with their API servers
    capacity: str = "declared"  # where free devices come from (`--capacity`: declared, live or a snapshot file)
    yes: bool = False  # `up --yes`: apply the moves a TeamPolicy forces on running replicas

    @property
    def on_operator(self) -> bool:
        return self.executor == "operator"

    def executor_options(self, parallel: int) -> ExecutorOptions:
        """What this run asks of its executor (automation/road/executor.py), `parallel` stacks at once."""
        from automation.road.executor import ExecutorOptions

        return ExecutorOptions("operator" if self.on_operator else "local", Path(self.state), self.backend, parallel,
                               kubeconfig_pairs(self.kubeconfig), unprotect=self.unprotect or self.destroy_clusters,
                               refresh=self.refresh, fleet_name=self.fleet_name, config=self.config,
                               forget=frozenset(self.forget), force=frozenset(self.force),
                               operator_settings=self.operator_settings, paths=self.paths)


def stack_settings(pairs: tuple[str, ...], files: tuple[str, ...]) -> dict[str, str]:
    """`--config-file` then `--config`: provider and program settings, `namespace:key` to a plain value.
    Exit 2 naming the file or pair that is not one."""
    import yaml

    out: dict[str, str] = {}

    def put(key: object, value: object, where: str) -> None:
        if not isinstance(key, str) or ":" not in key or key.startswith(":") or key.endswith(":"):
            click.echo(f"error: {where}: {key!r} is not a namespaced key such as gcp:project", err=True)
            raise SystemExit(2)
        if isinstance(value, dict) and "secure" in value:
            click.echo(f"error: {where}: {key} is encrypted (secure:): give secrets as the fleet's Secrets "
                       "(docs/teams.md), never as stack config here", err=True)
            raise SystemExit(2)
        out[key] = value if isinstance(value, str) else json.dumps(value)

    for path in files:
        try:
            document = yaml.safe_load(open(path, encoding="utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
            click.echo(f"error: --config-file {path}: not readable as YAML ({type(exc).__name__})", err=True)
            raise SystemExit(2) from None
        section = document.get("config") if isinstance(document, dict) else None
        if not isinstance(section, dict):
            click.echo(f"error: --config-file {path}: expected a `config:` mapping of KEY: VALUE", err=True)
            raise SystemExit(2)
        for key, value in section.items():
            put(key, value, f"--config-file {path}")
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            click.echo(f"error: --config {pair!r}: expected KEY=VALUE", err=True)
            raise SystemExit(2)
        put(key, value, f"--config {pair}")
    return out
