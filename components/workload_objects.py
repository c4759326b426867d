"""Apply one stack's rendered Kubernetes objects to one target cluster.

The objects come from `workloads/` (already checked against their schemas). They are applied
as one ConfigGroup, which orders Namespaces and CRDs first and gives every object its own
Pulumi resource. A Secret rendered as a placeholder (a cache's token) is created here from a
Pulumi secret instead, so its value is never in a manifest, a log or plain state.
"""

from __future__ import annotations

from typing import Mapping

import pulumi
import pulumi_kubernetes as k8s

from workloads.service_routing import PLACEHOLDER_ANNOTATION

TYPE = "modelplane:workload:Objects"


def is_placeholder_secret(obj: dict) -> bool:
    return obj["kind"] == "Secret" and PLACEHOLDER_ANNOTATION in (obj["metadata"].get("annotations") or {})


def secret_config_key(obj: dict, key: str) -> str:
    """The stack config key holding a placeholder Secret's value."""
    return f"secret-{obj['metadata']['name']}-{key}".lower()


class WorkloadObjects(pulumi.ComponentResource):
    def __init__(self, name: str, objects: list[dict], provider: k8s.Provider, config: pulumi.Config | None = None,
                 secrets: Mapping[str, str] | None = None, renamed_from: str | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        """`secrets`: placeholder Secrets' values by config key, handed to the program in memory (the automation
        layer's inline programs), so they are never on a command line; missing keys come from secret config.
        `renamed_from`: the name this component had before (its stack was renamed): it and each child are aliased
        to their names then, and the ConfigGroup's objects inherit the group's alias (`<group>:<object>`)."""
        def was(suffix: str = "") -> list[pulumi.Alias]:
            return [pulumi.Alias(name=renamed_from + suffix)] if renamed_from and renamed_from != name else []

        super().__init__(TYPE, name, None, pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(aliases=was())))
        child = pulumi.ResourceOptions(provider=provider, parent=self)
        plain = [o for o in objects if not is_placeholder_secret(o)]
        created: list[k8s.core.v1.Secret] = []
        for obj in objects:
            if is_placeholder_secret(obj):
                values = {key: pulumi.Output.secret(secrets[secret_config_key(obj, key)])
                          if secrets and secret_config_key(obj, key) in secrets
                          else (config or pulumi.Config("modelplane")).require_secret(secret_config_key(obj, key))
                          for key in obj.get("stringData", {})}
                meta = {k: v for k, v in obj["metadata"].items() if k != "annotations"}
                created.append(k8s.core.v1.Secret(
                    f"{name}-{obj['metadata']['name']}", metadata=meta, type=obj.get("type", "Opaque"),
                    string_data=values, opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                        aliases=was(f"-{obj['metadata']['name']}")))))
        self.objects = k8s.yaml.v2.ConfigGroup(name, objs=plain, opts=pulumi.ResourceOptions(
            provider=provider, parent=self, depends_on=created, aliases=was()))
        self.register_outputs({})
