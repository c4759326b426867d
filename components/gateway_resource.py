"""A Gateway API Gateway whose `status` is an output, so its address can be exported.

pulumi_kubernetes' generic CustomResource exposes only apiVersion, kind, metadata and spec.
Registering the same resource type with `status` among its properties makes the provider's
returned status available. With `wait_for_address`, the `pulumi.com/waitFor` annotation makes
the update wait until the Gateway has an address; without it (no load balancer can give one)
the update does not wait and the address output stays empty until one is assigned.
"""

from __future__ import annotations

import pulumi
from pulumi_kubernetes import _utilities

WAIT_FOR_ADDRESS = {"pulumi.com/waitFor": "jsonpath={.status.addresses[0].value}"}
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}


class Gateway(pulumi.CustomResource):
    def __init__(self, name: str, metadata: dict, spec: dict, wait_for_address: bool = True,
                 opts: pulumi.ResourceOptions | None = None):
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=_utilities.get_version()))
        wait = WAIT_FOR_ADDRESS if wait_for_address else SKIP_AWAIT
        metadata = {**metadata, "annotations": {**metadata.get("annotations", {}), **wait}}
        props = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": metadata,
                 "spec": spec, "status": None}
        super().__init__("kubernetes:gateway.networking.k8s.io/v1:Gateway", name, props, opts)

    @property
    def address(self) -> pulumi.Output:
        return self.status.apply(_first_address)  # type: ignore[attr-defined]


def _first_address(status) -> str | None:
    addresses = (status or {}).get("addresses") if isinstance(status, dict) else None
    return addresses[0].get("value") if addresses else None
