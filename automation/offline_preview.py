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


def expand(registered: list[Registered]) -> list[Registered]:
    """A ConfigGroup registers one child per object; under mocks it has none, so list its objects as it would."""
    out = []
    for r in registered:
        out.append(r)
        if r.type == "kubernetes:yaml/v2:ConfigGroup":
            for obj in r.inputs.get("objs") or []:
                meta = obj.get("metadata", {})
                name = f"{meta.get('namespace')}/{meta['name']}" if meta.get("namespace") else meta["name"]
                out.append(Registered("", f"kubernetes:{obj['apiVersion']}:{obj['kind']}", name, r.name, True,
                                      {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}))
    return out


def workload_stacks(fleet, control_plane: str | None = None) -> list[StackPreview]:
    from automation.programs import WORKLOAD_PROJECT, program_for
    from automation.stacks import desired_state

    specs = desired_state(fleet, control_plane=control_plane).specs
    previews = []
    for spec in sorted(specs.values(), key=lambda s: (s.rank, s.name)):
        if spec.kind in ("platform", "gateway"):
            continue
        secrets = {f"modelplane:{key}": PLACEHOLDER for key in _secret_keys(spec)}
        try:
            registered = run(program_for(spec, fleet), WORKLOAD_PROJECT, spec.name, secrets, list(secrets))
            previews.append(StackPreview(spec.name, [r for r in expand(registered)
                                                     if r.type != "pulumi:pulumi:StackReference"]))
        except Exception as exc:
            previews.append(StackPreview(spec.name, [], f"{type(exc).__name__}: {exc}"))
    return previews


def _secret_keys(spec) -> list[str]:
    from components.workload_objects import is_placeholder_secret, secret_config_key

    return [secret_config_key(o, k) for objs in spec.payload["objects"].values() for o in objs
            if is_placeholder_secret(o) for k in o.get("stringData", {})]


def all_stacks(fleet, control_plane: str | None = None) -> list[StackPreview]:
    return platform_stacks(fleet) + workload_stacks(fleet, control_plane)
