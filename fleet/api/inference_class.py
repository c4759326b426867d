"""InferenceClass: a hardware recipe, the devices a node offers and how to provision it."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field

from fleet.api.common import Int, Resource, Rule, Str, Strict, key_problem, unique
from fleet.quantity import QuantityError, parse_quantity
from fleet.semver import SemverError, parse_semver

Provider = Literal["GKE", "EKS", "AKS", "Nebius", "Vultr", "Civo"]


class Accelerator(Strict):
    type: Annotated[str, Str(1, 63)]
    count: Annotated[int, Int(1, 16)] = 1


class GKEProvisioning(Strict):
    machineType: Annotated[str, Str(1)]
    diskSizeGb: Annotated[int, Int(10)] = 100
    accelerator: Accelerator


class EKSProvisioning(Strict):
    instanceType: Annotated[str, Str(1)]
    diskSizeGb: Annotated[int, Int(10)] = 100
    accelerator: Accelerator | None = None  # informational on EKS: the instance type decides


class AKSProvisioning(Strict):
    vmSize: Annotated[str, Str(1)]
    diskSizeGb: Annotated[int, Int(10)] = 100
    accelerator: Accelerator | None = None


class NebiusProvisioning(Strict):
    platform: Annotated[str, Str(1)]
    preset: Annotated[str, Str(1)]
    diskSizeGb: Annotated[int, Int(10)] = 100
    driversPreset: str = "cuda13.0"
    accelerator: Accelerator | None = None


class VultrProvisioning(Strict):
    plan: Annotated[str, Str(1)]
    accelerator: Accelerator | None = None


class CivoProvisioning(Strict):
    """The reference's v0.5.0 (not in a stored XRD): a Civo node size, e.g. `an.g1.l40s.kube.x1`."""

    size: Annotated[str, Str(1)]
    accelerator: Accelerator | None = None


class Provisioning(Strict):
    provider: Provider
    gke: GKEProvisioning | None = None
    eks: EKSProvisioning | None = None
    aks: AKSProvisioning | None = None
    nebius: NebiusProvisioning | None = None
    vultr: VultrProvisioning | None = None
    civo: CivoProvisioning | None = None


class Attribute(Strict):
    string: Annotated[str, Str(0, 253)] | None = None
    version: Annotated[str, Str(0, 32)] | None = None
    bool_: bool | None = Field(default=None, alias="bool")
    int_: int | None = Field(default=None, alias="int")

    def typed(self) -> tuple[str, Any] | None:
        """(type, value) of the one value set, or None when none or several are set."""
        present = [(k, v) for k, v in (("string", self.string), ("version", self.version),
                                        ("bool", self.bool_), ("int", self.int_)) if v is not None]
        return present[0] if len(present) == 1 else None


def _int_to_str(value: Any) -> Any:
    # A quantity may be written as a bare YAML integer (`value: 8`), as Kubernetes allows.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class CapacityValue(Strict):
    value: Annotated[str, BeforeValidator(_int_to_str), Field(min_length=1, max_length=32)]


class Device(Strict):
    name: Annotated[str, Str(1, 63)]
    claim: Literal["DRA", "Synthetic"] = "DRA"
    driver: Annotated[str, Str(1, 253)]
    deviceClassName: Annotated[str, Str(1, 253)] | None = None
    count: Annotated[int, Int(1, 64)] = 1
    attributes: dict[str, Attribute] | None = Field(default=None, max_length=32)
    capacity: dict[str, CapacityValue] | None = Field(default=None, max_length=32)


class Topology(Strict):
    """Not in the reference's API (an optional addition): the node labels that name where a node sits, for
    topology-aware gang scheduling (Grove's ClusterTopology on a Dynamo cluster). `nvlinkDomainLabel` is the label
    whose value names a node's NVLink domain, e.g. `nvidia.com/gpu.clique` on GB200/GB300 NVL72 nodes; a pool whose
    class declares none cannot host an engine with the `NVLinkDomain` capability."""

    nvlinkDomainLabel: Annotated[str, Str(1, 316)] | None = None
    rackLabel: Annotated[str, Str(1, 316)] | None = None
    zoneLabel: Annotated[str, Str(1, 316)] | None = None


class InferenceClassSpec(Strict):
    description: str | None = None
    provisioning: Provisioning | None = None
    devices: list[Device] = Field(min_length=1, max_length=16)
    topology: Topology | None = None


class InferenceClass(Resource):
    kind: Literal["InferenceClass"]
    spec: InferenceClassSpec
    status: dict[str, Any] | None = None

    namespaced: ClassVar[bool] = False


def device_rules(device: Device, path: tuple) -> Rule:
    if device.claim == "DRA" and device.deviceClassName is None:
        yield path + ("deviceClassName",), "claim DRA needs deviceClassName (the DRA DeviceClass to claim from)"
    for key, attr in sorted((device.attributes or {}).items()):
        typed = attr.typed()
        if typed is None:
            yield path + ("attributes", key), "exactly one of string, version, bool or int must be set"
        elif typed[0] == "version":
            try:
                parse_semver(typed[1])
            except SemverError as exc:
                yield path + ("attributes", key, "version"), f"not a semantic version: {exc}"
    for key, cap in sorted((device.capacity or {}).items()):
        try:
            parse_quantity(cap.value)
        except QuantityError as exc:
            yield path + ("capacity", key, "value"), str(exc)


def machine_shape_rules(icl: InferenceClass) -> Rule:
    """The machine type must carry the accelerator and count the class declares (and its devices publish)."""
    from fleet.backends import NVIDIA_DRIVER
    from fleet.machines import shape_problems

    prov = icl.spec.provisioning
    block = getattr(prov, prov.provider.lower(), None) if prov else None
    if prov is None or block is None or prov.provider not in ("GKE", "EKS", "AKS", "Nebius"):
        return
    machine = {"GKE": "machineType", "EKS": "instanceType", "AKS": "vmSize", "Nebius": "preset"}[prov.provider]
    accelerator = block.accelerator
    gpus = [d.count for d in icl.spec.devices if d.driver == NVIDIA_DRIVER and d.claim == "DRA"]
    for field, message in shape_problems(prov.provider, getattr(block, machine), accelerator.type if accelerator else None,
                                         accelerator.count if accelerator else None, gpus[0] if len(gpus) == 1 else None,
                                         getattr(block, "platform", None)):
        yield ("spec", "provisioning", prov.provider.lower(), *field.split(".")), message


def inference_class_rules(icl: InferenceClass) -> Rule:
    prov = icl.spec.provisioning
    if prov is not None:
        block = prov.provider.lower()
        if getattr(prov, block) is None:
            yield ("spec", "provisioning", block), f"provider {prov.provider} needs the {block} block"
        yield from machine_shape_rules(icl)
    yield from unique(icl.spec.devices, lambda d: d.name, ("spec", "devices"), "device name")
    for i, device in enumerate(icl.spec.devices):
        yield from device_rules(device, ("spec", "devices", i))
    topology = icl.spec.topology
    for field in ("nvlinkDomainLabel", "rackLabel", "zoneLabel"):
        key = getattr(topology, field) if topology else None
        # Grove's ClusterTopology takes a key of at most 63 characters, prefix included
        if key is not None and (problem := key_problem(key) or ("is longer than 63 characters (Grove's limit)"
                                                                if len(key) > 63 else None)):
            yield ("spec", "topology", field), problem
