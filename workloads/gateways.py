"""The gateway addresses the applied stacks output: read from the record, rendered into endpoints.

Its own module: the record carries it, and reading the record (or skipping it, `--fresh`) need not load what
renders objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

GATEWAY_CLUSTER_OUTPUT = "gatewayCluster"  # the gateway stack's: the v0.5 gateway's name and the cluster it runs on


@dataclass(frozen=True)
class Gateways:
    """Gateway addresses the applied stacks output: per cluster (`platform-<cluster>`'s `gatewayAddress`) and the
    fleet's front door (the `gateway` stack's `address`), and the front door's client CA (its
    `clientCACertificate`, PEM: public), which every cluster's fleet listener accepts (workloads/front_door_mtls.py)."""

    clusters: Mapping[str, str] = field(default_factory=dict)
    front_door: str | None = None
    client_cas: tuple[str, ...] = ()
