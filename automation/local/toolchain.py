"""Where the real engine's programs are: the Pulumi CLI, the Kubernetes provider, the control plane, etcd, kwok.

`make toolchain` builds them from pinned Go modules (tools/realengine/build.py) and links them into the project's
git-ignored `.modelplane/toolchain/bin/`. Commands find that folder from any working directory through this
package's own location (the project the command is installed from), or through $MODELPLANE_TOOLCHAIN_BIN. A
`pulumi` on PATH whose version is at least the toolchain's minimum is used in place of the built one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

PROJECT = Path(__file__).resolve().parents[2]
BUILT = PROJECT / ".modelplane" / "toolchain" / "bin"
# the oldest Pulumi CLI the project runs its inline programs with (refresh and destroy of inline programs: 3.181)
MINIMUM_PULUMI = (3, 181, 0)
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kwok-stages",
                 "kubectl", "lws-controller")
ENGINE = ("pulumi", "pulumi-resource-kubernetes")


class ToolchainMissing(Exception):
    pass


def _version(text: str) -> tuple[int, ...] | None:
    core = text.strip().lstrip("v").split("-")[0].split("+")[0]
    try:
        return tuple(int(p) for p in core.split("."))
    except ValueError:
        return None


@dataclass(frozen=True)
class Toolchain:
    folder: Path

    def binary(self, name: str) -> Path:
        if name == "pulumi":
            ambient = ambient_pulumi()
            if ambient is not None:
                return ambient
        path = self.folder / name
        if not os.access(path, os.X_OK):
            raise ToolchainMissing(f"{name} is not built: run `make toolchain` in {PROJECT} (it builds the real "
                                   "engine from pinned Go modules; about an hour the first time on 2 cores)")
        return path

    def missing(self, names: tuple[str, ...] = CONTROL_PLANE + ENGINE) -> list[str]:
        out = []
        for name in names:
            try:
                self.binary(name)
            except ToolchainMissing:
                out.append(name)
        return out

    @property
    def pulumi_home(self) -> Path:
        """The toolchain's own Pulumi home: the provider built here is registered there for the Python SDK's
        version, so a user's ~/.pulumi plugin cache never holds it (docs/local-fleet.md, "The toolchain")."""
        return self.folder.parent / "pulumi-home"


def find() -> Toolchain:
    explicit = os.environ.get("MODELPLANE_TOOLCHAIN_BIN")
    return Toolchain(Path(explicit) if explicit else BUILT)


def engine_env(environ: Mapping[str, str], passphrase: str, cache: Path) -> dict[str, str]:
    """The environment of a `modelplane` command driven from outside against a local fleet with the built engine (the
    real-engine tier, benchmarks/real_up_cost.py): the caller's, less its Pulumi settings, kubeconfig overrides and
    MODELPLANE_NO_TOOLCHAIN; a passphrase and a cache folder of its own; the toolchain's Pulumi home, where plugins
    are never downloaded; this project's modules; the built `pulumi` on PATH unless one is there already (as
    `modelplane` itself would find it)."""
    env = {k: v for k, v in environ.items()
           if not k.startswith(("PULUMI_", "MODELPLANE_KUBECONFIG_", "MODELPLANE_NO_TOOLCHAIN"))}
    env.update({"PULUMI_CONFIG_PASSPHRASE": passphrase, "MODELPLANE_CACHE_DIR": str(cache),
                "PULUMI_SKIP_UPDATE_CHECK": "true", "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
                "PULUMI_HOME": str(find().pulumi_home), "PYTHONPATH": str(PROJECT)})
    if shutil.which("pulumi", path=env.get("PATH")) is None:
        env["PATH"] = f"{find().folder}{os.pathsep}{env.get('PATH', '')}"
    return env


def ambient_pulumi() -> Path | None:
    """A `pulumi` on PATH, outside the toolchain, new enough to use."""
    found = shutil.which("pulumi")
    if not found or Path(found).resolve().parent == BUILT.resolve():
        return None
    try:
        out = subprocess.run([found, "version"], capture_output=True, text=True, timeout=30,
                             env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"}).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = _version(out)
    return Path(found) if version is not None and version >= MINIMUM_PULUMI else None


def provider_version() -> str:
    """The Kubernetes provider version the Python SDK asks the engine for."""
    import json
    from importlib import resources

    return json.loads(resources.files("pulumi_kubernetes").joinpath("pulumi-plugin.json").read_text())["version"]


def register_provider(tools: Toolchain) -> None:
    """The provider built here, registered in the toolchain's Pulumi home under the version the SDK requests: the
    proxy serves only an older provider (tools/realengine/build.py PROVIDER_VERSION), and the engine would
    otherwise try to download the requested one. Done once; a user's own ~/.pulumi is never touched."""
    version = provider_version()
    plugin = tools.pulumi_home / "plugins" / f"resource-kubernetes-v{version}"
    built = tools.binary("pulumi-resource-kubernetes")
    marker = tools.pulumi_home / f"kubernetes-{version}.from"  # which build is registered (its cache folder names it)
    if (plugin / "pulumi-resource-kubernetes").is_file() and marker.is_file() \
            and marker.read_text() == str(built.resolve()):
        return
    done = subprocess.run([str(tools.binary("pulumi")), "plugin", "install", "resource", "kubernetes", version,
                           "--file", str(built), "--reinstall"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PULUMI_HOME": str(tools.pulumi_home), "PULUMI_SKIP_UPDATE_CHECK": "true"})
    if done.returncode != 0:
        raise ToolchainMissing(f"registering the built Kubernetes provider as {version} failed: "
                               f"{(done.stderr or done.stdout).strip().splitlines()[-1:] or ['no output']}")
    marker.write_text(str(built.resolve()))


def activate() -> bool:
    """When no other Pulumi CLI is on PATH and the toolchain has one: put the toolchain first on PATH and use its
    Pulumi home (unless PULUMI_HOME is set), for this process and what it starts. True when it did.
    $MODELPLANE_NO_TOOLCHAIN turns this off (the test suite sets it: a test means the real engine or not)."""
    if os.environ.get("MODELPLANE_NO_TOOLCHAIN"):
        return False
    tools = find()
    found = shutil.which("pulumi")
    if found is not None and Path(found).resolve() != (tools.folder / "pulumi").resolve():
        return False  # the user's own CLI, with the user's own plugins
    if tools.missing(ENGINE):
        return False
    if found is None:
        os.environ["PATH"] = f"{tools.folder}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ.setdefault("PULUMI_HOME", str(tools.pulumi_home))
    if Path(os.environ["PULUMI_HOME"]) == tools.pulumi_home:
        register_provider(tools)
        # the registered provider, not the binary beside `pulumi` on PATH: one way it is found
        os.environ.setdefault("PULUMI_IGNORE_AMBIENT_PLUGINS", "true")
    return True


def registered_provider_warning(message: str) -> bool:
    """The engine's warning that the provider it runs is older than the SDK asked for, when that provider is the one
    this toolchain registered on purpose (`register_provider`; docs/local-fleet.md says why): said once in the docs,
    not once per stack of every run."""
    if Path(os.environ.get("PULUMI_HOME") or "/nonexistent") != find().pulumi_home:
        return False
    return message.startswith("resource plugin kubernetes is expected to have version >=") and message.rstrip(
        "; ").split(", but has ", 1)[-1].startswith(BUILT_PROVIDER + ";")


BUILT_PROVIDER = "4.25.0"  # tools/realengine/build.py PROVIDER_VERSION (a test holds the two together)

