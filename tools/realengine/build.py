"""Builds the real engine's toolchain from pinned Go modules: the Pulumi CLI, the Kubernetes provider, the control
plane (kube-apiserver, kube-controller-manager, kube-scheduler), etcd, kwok and the LeaderWorkerSet controller.

`make toolchain` runs it with the machine's python3 (no virtual environment needed). Each family is one small Go
module in this folder (their dependency graphs must not mix: the provider's k8s.io 0.33 and Helm would otherwise
be forced onto the control plane's 0.37). A family builds into a machine-wide cache folder named by the hash of
its module files and of its recipe below, so a second build, or a fresh clone on the same machine, takes seconds;
the repository's git-ignored `.modelplane/toolchain/bin/` links to what was built. Nothing built is committed.

Exit 0 with every binary in place; exit 1 with one line saying which family failed and where its log is.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LINKS = ROOT / ".modelplane" / "toolchain" / "bin"
# Recipe version: bump it when a build step changes in a way the module files do not show.
RECIPE = "1"


def cache_root() -> Path:
    explicit = os.environ.get("MODELPLANE_TOOLCHAIN_CACHE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "modelplane" / "toolchain"


@dataclass(frozen=True)
class Family:
    name: str
    outputs: tuple[tuple[str, str], ...]  # (binary, main package); "." is the module's own main
    minutes: int  # a cold build's time on 2 cores, for the progress line
    ldflags: tuple[str, ...] = ()
    generate: bool = False  # the provider's embedded files (written before the build)

    @property
    def binaries(self) -> tuple[str, ...]:
        return tuple(binary for binary, _ in self.outputs)


def module_version(family: str, module: str) -> str:
    """The version of `module` that a family's go.mod requires (the one pin: nothing repeats it here)."""
    for line in (HERE / family / "go.mod").read_text().splitlines():
        words = line.replace("require ", "").split()
        if len(words) >= 2 and words[0] == module:
            return words[1]
    raise SystemExit(f"tools/realengine/{family}/go.mod: no requirement on {module}")


def families() -> list[Family]:
    pulumi = module_version("pulumi", "github.com/pulumi/pulumi/pkg/v3")
    kube = module_version("kube", "k8s.io/kubernetes")
    minor = kube.lstrip("v").split(".")[1]
    kwok = module_version("kwok", "sigs.k8s.io/kwok")
    lws = module_version("lws", "sigs.k8s.io/lws")
    component = "k8s.io/component-base/version"
    return [
        # the automation API refuses a CLI whose `pulumi version` is empty: the version flag is required
        Family("pulumi", (("pulumi", "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"),), 12,
               (f"-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version={pulumi}",)),
        Family("k8sprovider", (("pulumi-resource-kubernetes", "."),), 10,
               (f"-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version={PROVIDER_VERSION}",),
               generate=True),
        Family("kube", tuple((name, f"k8s.io/kubernetes/cmd/{name}")
                             for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")), 20,
               (f"-X {component}.gitVersion={kube}", f"-X {component}.gitMajor=1", f"-X {component}.gitMinor={minor}",
                f"-X {component}.gitTreeState=clean")),
        Family("etcd", (("etcd", "."),), 3),
        Family("kwok", (("kwok", "sigs.k8s.io/kwok/cmd/kwok"), ("kwok-stages", "./stages")), 5,
               (f"-X sigs.k8s.io/kwok/pkg/consts.Version={kwok.lstrip('v')}",)),
        Family("lws", (("lws-controller", "sigs.k8s.io/lws/cmd"),), 4,
               (f"-X sigs.k8s.io/lws/pkg/version.GitVersion={lws}",)),
    ]


# The proxy serves the provider only as the pseudo-version of its v4.25.0 tag (there are no provider/v4 tags); the
# binary reports this version and is registered for the Python SDK's (docs/local-fleet.md, "The toolchain").
PROVIDER_VERSION = "4.25.0"


def digest(family: Family) -> str:
    h = hashlib.sha256(f"{RECIPE}\n{family}\n{sys.platform}\n".encode())
    folder = HERE / family.name
    for path in sorted(p for p in folder.rglob("*") if p.name in ("go.mod", "go.sum") or p.suffix == ".go"):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.encode())
    return h.hexdigest()[:16]


def built(family: Family) -> Path:
    return cache_root() / f"{family.name}-{digest(family)}"


def _generate(module_dir: Path, into: Path) -> None:
    """The provider's `go generate`: its schema with the version set, and its Terraform mapping, as embed files."""
    source = module_dir / "cmd" / "pulumi-resource-kubernetes"
    schema = json.loads((source / "schema.json").read_text())
    schema["version"] = PROVIDER_VERSION
    (into / "schema-embed.json").write_text(json.dumps(schema))
    (into / "terraform-mapping-embed.json").write_text(json.dumps(json.loads((source / "terraform-mapping.json")
                                                                               .read_text())))


def _go(args: list[str], cwd: Path, log, env: dict[str, str]) -> None:
    log.write(f"$ go {' '.join(args)}\n")
    log.flush()
    subprocess.run(["go", *args], cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env, check=True)


def build(family: Family, jobs: int) -> Path:
    """Builds one family into its cache folder (atomically: a folder that exists is complete)."""
    target = built(family)
    if all((target / "bin" / b).is_file() for b in family.binaries):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{family.name}-", dir=target.parent))
    log_path = target.parent / f"{family.name}.log"
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    with open(log_path, "w") as log:
        # a copy of the module: the provider's generated files never land in the work tree
        src = work / "src"
        shutil.copytree(HERE / family.name, src)
        if family.generate:
            _go(["mod", "download"], src, log, env)
            module = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}",
                                     "github.com/pulumi/pulumi-kubernetes/provider/v4"], cwd=src, env=env,
                                    capture_output=True, text=True, check=True).stdout.strip()
            _generate(Path(module), src)
        ldflags = " ".join(("-s", "-w", *family.ldflags))
        out = work / "bin"
        out.mkdir()
        for binary, package in family.outputs:  # one at a time: the build cache shares what they have in common
            _go(["build", "-p", str(jobs), "-trimpath", "-ldflags", ldflags, "-o", str(out / binary), package],
                src, log, env)
    shutil.rmtree(src, ignore_errors=True)
    if target.exists():  # another build finished first: keep its result
        shutil.rmtree(work, ignore_errors=True)
    else:
        work.rename(target)
    return target


def link(family: Family, folder: Path) -> None:
    LINKS.mkdir(parents=True, exist_ok=True)
    for name in family.binaries:
        path = LINKS / name
        if path.is_symlink() or path.exists():
            path.unlink()
        path.symlink_to(folder / "bin" / name)


def _heartbeat(name: str, minutes: int, done: threading.Event) -> None:
    start = time.monotonic()
    while not done.wait(30):
        print(f"  ... still building {name} ({int(time.monotonic() - start)} s; a cold build takes about {minutes} "
              "min on 2 cores)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("families", nargs="*", help="only these (default: all)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--print-bin", action="store_true", help="print the folder of links, build nothing")
    args = parser.parse_args()
    if args.print_bin:
        print(LINKS)
        return 0
    if shutil.which("go") is None:
        print("toolchain: no `go` on PATH: the real engine cannot be built on this machine", file=sys.stderr)
        return 1
    chosen = [f for f in families() if not args.families or f.name in args.families]
    for family in chosen:
        cached = built(family)
        fresh = not all((cached / "bin" / b).is_file() for b in family.binaries)
        if fresh:
            print(f"toolchain: building {family.name} ({', '.join(family.binaries)}), about {family.minutes} min the "
                  "first time", flush=True)
        started, done = time.monotonic(), threading.Event()
        beat = threading.Thread(target=_heartbeat, args=(family.name, family.minutes, done), daemon=True)
        if fresh:
            beat.start()
        try:
            folder = build(family, args.jobs)
        except subprocess.CalledProcessError:
            print(f"toolchain: building {family.name} failed; its log is {cache_root() / (family.name + '.log')}",
                  file=sys.stderr)
            return 1
        finally:
            done.set()
        link(family, folder)
        if fresh:
            print(f"toolchain: {family.name} built in {time.monotonic() - started:.0f} s", flush=True)
    print(f"toolchain: ready in {LINKS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
