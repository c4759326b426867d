"""`modelplane preview --offline`: every stack's real program under Pulumi's mocks.

Lists, per stack, the resources its program would register (type, name, parent, inputs with
secrets masked). No CLI, no credentials, no cloud: what providers would compute is unknown,
so this reviews what the programs ask for, not what a cloud would answer. Secret config the
programs need (kubeconfigs of existing clusters) is replaced by a masked placeholder.
"""

from __future__ import annotations

from dataclasses import dataclass

from automation.offline import Registered, run
from infra.program import platform

PROJECT = "modelplane-platform"
PLACEHOLDER = "offline preview: no kubeconfig is read"


@dataclass
class StackPreview:
    name: str
    resources: list[Registered]
    error: str | None = None

    def to_dict(self) -> dict:
        out = {"name": self.name, "resources": [r.to_dict() for r in self.resources]}
        if self.error:
            out["error"] = self.error
        return out


def _placeholder_secrets(fleet) -> dict[str, str]:
    return {f"modelplane:{ic.spec.cluster.existing.secretRef.name}": PLACEHOLDER
            for ic in fleet.of("InferenceCluster") if ic.spec.cluster.source == "Existing"}


def platform_stacks(fleet) -> list[StackPreview]:
    secrets = _placeholder_secrets(fleet)
    previews = []
    targets = [(f"platform-{ic.name}", {"modelplane:cluster": ic.name}) for ic in sorted(fleet.of("InferenceCluster"), key=lambda c: c.name)]
    if fleet.of("InferenceGateway"):
        targets.append(("gateway", {"modelplane:gatewayOnly": "true", "modelplane:controlPlaneKubeconfig": PLACEHOLDER}))
    for stack, config in targets:
        secret_keys = list(secrets) + (["modelplane:controlPlaneKubeconfig"] if stack == "gateway" else [])
        try:
            registered = run(lambda: platform(fleet), PROJECT, stack, {**config, **secrets}, secret_keys)
            previews.append(StackPreview(stack, registered))
        except Exception as exc:  # one stack's failure is reported with it; the others still preview
            previews.append(StackPreview(stack, [], f"{type(exc).__name__}: {exc}"))
    return previews
