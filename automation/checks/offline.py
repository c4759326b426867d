"""Run a stack's real Pulumi program under Pulumi's mock runtime: no CLI, no cloud, no credentials.

This is how `modelplane preview --offline` lists what each stack would register, and how the
tests check components. It records every resource registration (type, name, parent, inputs,
whether custom) as the engine would receive it; providers are not run, so nothing a provider
would compute (cloud IDs, Helm rendering) is known, and a few outputs are faked so programs
that read them can finish.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import pulumi
from pulumi.runtime.mocks import MockMonitor

from automation.checks.fake_outputs import FAKE_CALLS, FAKE_OUTPUTS, echoed
from fleet.errors import ModelplaneError

SECRET_SIG = "4dabf18193072939515e22adb298388d"
MASK = "[secret]"


@dataclass
class Registered:
    urn: str
    type: str
    name: str
    parent: str | None  # the parent resource's name
    custom: bool
    inputs: dict = field(default_factory=dict)
    depends_on: list[str] = field(default_factory=list)  # names of resources it waits for (and outlives on delete)
    provider: str | None = None  # the name of the explicit provider resource it uses (its own or inherited)
    providers: dict[str, str] = field(default_factory=dict)  # components: package -> provider name
    cluster: str | None = None  # Kubernetes resources: the InferenceCluster it lands on (set by the preview)
    options: dict = field(default_factory=dict)  # resource options set: protect, ignoreChanges, customTimeouts, ...
    dependency_urns: list[str] = field(default_factory=list, repr=False)  # what it waits for, exactly (for checks)
    parent_urn: str | None = field(default=None, repr=False)

    def to_dict(self, masked: bool = True) -> dict:
        out = {"type": self.type, "name": self.name, "parent": self.parent, "dependsOn": self.depends_on,
               "inputs": mask(self.inputs) if masked else self.inputs}
        if self.provider is not None:
            out["provider"] = self.provider
        if self.cluster is not None:
            out["cluster"] = self.cluster
        if self.options:
            out["options"] = self.options
        return out


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and SECRET_SIG in value


def _plain(value: Any, secret) -> Any:
    """Wire values as plain Python: each secret through `secret`, whole floats back to ints."""
    if isinstance(value, dict):
        if SECRET_SIG in value:  # is_secret, inline: every value of every preview passes here
            return secret(value)
        return {k: _plain(v, secret) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, secret) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def unwrap(value: Any) -> Any:
    """Secrets unwrapped: for assertions."""
    return _plain(value, lambda v: unwrap(v.get("value")))


def mask(value: Any) -> Any:
    """Every secret replaced by a marker: safe to print."""
    return _plain(value, lambda v: MASK)


class Recorder(pulumi.runtime.Mocks):
    def __init__(self):
        self.calls: list = []
        self._last: dict[int, Any] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self._last[threading.get_ident()] = args
        if args.typ == "pulumi:pulumi:StackReference":  # another stack's outputs: a placeholder kubeconfig
            return f"{args.name}-id", {**args.inputs, "outputs": {"kubeconfig": "offline preview: no kubeconfig is read"},
                                       "secretOutputNames": ["kubeconfig"]}
        state = echoed(args.typ, args.inputs)
        state.update(FAKE_OUTPUTS.get(args.typ, {}))
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs):
        self.calls.append(args)
        return dict(FAKE_CALLS.get(args.token, {}))

    def take_last(self):
        return self._last.pop(threading.get_ident(), None)


class RecordingMonitor(MockMonitor):
    """The mock monitor, also remembering each resource's parent (the Mocks API does not pass it)."""

    def __init__(self, mocks: Recorder):
        super().__init__(mocks)
        self.recorder = mocks
        self.registered: list[Registered] = []
        self._names: dict[str, str] = {}

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        args = self.recorder.take_last()
        if request.type != "pulumi:pulumi:Stack":
            self._names[response.urn] = request.name
            parent = self._names.get(request.parent) if request.parent else None
            depends = sorted({self._names.get(urn, urn.rsplit("::", 1)[-1]) for urn in request.dependencies})
            provider = self._provider_name(request.provider)
            providers = {pkg: self._provider_name(ref) or ref for pkg, ref in dict(request.providers).items()}
            if provider is None and request.remote:  # a remote component names its own package's provider here
                provider = providers.get(request.type.split(":", 1)[0])
            self.registered.append(Registered(response.urn, request.type, request.name, parent,
                                              bool(request.custom), dict(args.inputs) if args else {}, depends,
                                              provider, providers, options=_options(request),
                                              dependency_urns=sorted(request.dependencies),
                                              parent_urn=request.parent or None))
        return response

    def _provider_name(self, reference: str) -> str | None:
        """A provider reference is `<urn>::<id>`; the name is what the preview and the checks speak of."""
        if not reference:
            return None
        urn = reference.rsplit("::", 1)[0]
        return self._names.get(urn, urn.rsplit("::", 1)[-1])

    def ReadResource(self, request):
        response = super().ReadResource(request)
        args = self.recorder.take_last()
        if request.type == "pulumi:pulumi:StackReference" and args is not None:  # what a program reads from others
            self._names[response.urn] = request.name
            self.registered.append(Registered(response.urn, request.type, request.name, None, True, dict(args.inputs),
                                              options={"read": True}))
        return response


def _options(request) -> dict:
    """The resource options a reviewer (and the deployability check) cares about, only where set."""
    out: dict = {}
    if request.protect:
        out["protect"] = True
    if request.retainOnDelete:
        out["retainOnDelete"] = True
    if request.deleteBeforeReplace:
        out["deleteBeforeReplace"] = True
    if request.ignoreChanges:
        out["ignoreChanges"] = sorted(request.ignoreChanges)
    if request.aliases:  # the names it had (an alias spec's, or an alias URN's last part)
        out["aliases"] = sorted(a.spec.name if a.HasField("spec") else a.urn.rsplit("::", 1)[-1]
                                for a in request.aliases)
    timeouts = request.customTimeouts
    if timeouts.create or timeouts.update or timeouts.delete:
        out["customTimeouts"] = {k: v for k, v in (("create", timeouts.create), ("update", timeouts.update),
                                                   ("delete", timeouts.delete)) if v}
    return out


class OfflineRunError(ModelplaneError):
    pass


def _ensure_event_loop() -> None:
    """Pulumi's mock runtime runs on the thread's current event loop; a caller that used asyncio.run() before
    (a portal test, a library) leaves none set, and the program would fail with "no current event loop"."""
    import asyncio
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop()
        except RuntimeError:
            loop = None
    if loop is None or loop.is_closed():
        asyncio.set_event_loop(asyncio.new_event_loop())


def run(program: Callable[[], Any], project: str, stack: str, config: dict[str, Any] | None = None,
        secret_keys: list[str] | None = None, root_directory: str | None = None,
        organization: str = "organization") -> list[Registered]:
    """Run `program` under mocks as stack `stack` of `project`; return what it registered, in order.

    `root_directory` is what the CLI would report as the folder of Pulumi.yaml (the mocks otherwise
    report a placeholder); `organization` is the backend's (DIY backends: `organization`).
    """
    mocks = Recorder()
    monitor = RecordingMonitor(mocks)
    _ensure_event_loop()
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False, monitor=monitor,
                             organization=organization)
    pulumi.runtime.settings.SETTINGS.root_directory = root_directory
    pulumi.runtime.set_all_config({k: v if isinstance(v, str) else json.dumps(v)
                                   for k, v in (config or {}).items()}, secret_keys or [])
    try:
        pulumi.runtime.test(program)()
    except pulumi.RunError as exc:
        raise OfflineRunError(str(exc)) from None
    return monitor.registered
