"""A local fleet of real Kubernetes control planes, one per Existing InferenceCluster, on loopback.

One etcd serves every cluster (each API server keeps its objects under its own `--etcd-prefix`). Per cluster: a
real kube-apiserver, kube-controller-manager and kube-scheduler, and kwok, which keeps the simulated Nodes alive
and marks the pods the scheduler binds to them running. The processes outlive the command that starts them (as
minikube's do): their pids and ports are in `<state>/local/fleet.json`, and `down` stops them all.

What is simulated, and why nothing is ever dialled but loopback: nodes and pods get documentation addresses
(RFC 5737: pods 192.0.2.0/24, Services 198.51.100.0/24, nodes 203.0.113.1), which no route leads to; the API servers
run no APIServices and no admission webhook but the LeaderWorkerSet controller's, which this machine serves on
127.0.0.1 and which is registered by URL; their endpoint reconciler is off. Containers never run: kwok only writes
the status a kubelet would.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from automation.local import pki as pki_
from automation.local.toolchain import Toolchain

POD_RANGE = "192.0.2.0/24"
SERVICE_RANGE = "198.51.100.0/24"
NODE_ADDRESS = "203.0.113.1"


class LocalFleetError(Exception):
    """A failure the user can act on, said in one line."""


def identity(pid: int) -> str:
    """The boot and the start time of the process with this pid ("" when unknown): a pid reused by another process
    (pids wrap at 32,768 here, within minutes on a busy machine; and after every reboot) has another."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            started = stat.read().rsplit(")", 1)[1].split()[19]  # field 22, starttime; the fields after comm are 3..
        with open("/proc/sys/kernel/random/boot_id") as boot:
            return f"{boot.read().strip()}:{started}"
    except (OSError, IndexError):
        return ""


@dataclass
class Process:
    name: str
    pid: int
    log: str
    started: str = ""  # `identity` when it started ("" in records written before it was kept)

    def alive(self) -> bool:
        """Running, and still the process this record started: never another that has its pid since."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        if self.started and identity(self.pid) not in (self.started, ""):
            return False
        try:  # a zombie of ours is not alive
            with open(f"/proc/{self.pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return True


@dataclass
class LocalCluster:
    name: str
    port: int
    kubeconfig: str
    processes: list[Process] = field(default_factory=list)
    lws_webhook_port: int = 0  # where the LeaderWorkerSet controller serves its admission webhooks (loopback)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"


@dataclass
class LocalFleet:
    folder: Path
    etcd: Process | None = None
    etcd_port: int = 0
    clusters: dict[str, LocalCluster] = field(default_factory=dict)

    @property
    def file(self) -> Path:
        return self.folder / "fleet.json"

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        data = {"etcd": asdict(self.etcd) if self.etcd else None, "etcd_port": self.etcd_port,
                "clusters": {n: asdict(c) for n, c in self.clusters.items()}}
        partial = self.file.with_suffix(".partial")
        partial.write_text(json.dumps(data, indent=2))
        partial.replace(self.file)

    @classmethod
    def load(cls, folder: Path) -> LocalFleet:
        fleet = cls(folder)
        if not fleet.file.is_file():
            return fleet
        data = json.loads(fleet.file.read_text())
        fleet.etcd = Process(**data["etcd"]) if data.get("etcd") else None
        fleet.etcd_port = data.get("etcd_port", 0)
        for name, c in (data.get("clusters") or {}).items():
            fleet.clusters[name] = LocalCluster(c["name"], c["port"], c["kubeconfig"],
                                                [Process(**p) for p in c.get("processes", [])],
                                                c.get("lws_webhook_port", 0))
        return fleet


def local_folder(state: Path) -> Path:
    return state.resolve() / "local"


def kubeconfig_path(state: Path, cluster: str) -> Path:
    """Where `up`, `plan` and every other command find a local cluster's kubeconfig without flags."""
    return local_folder(state) / cluster / "kubeconfig"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(name: str, argv: list[str], logs: Path, env: dict[str, str] | None = None) -> Process:
    """A process of the local fleet, in a session of its own (a Ctrl-C of the command that started it does not
    stop it), its output in its log."""
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with open(log, "ab") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True, env={**os.environ, **(env or {})})
    return Process(name, child.pid, str(log), identity(child.pid))


def _wait(what: str, ready, process: Process, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return
        if not process.alive():
            raise LocalFleetError(f"{what} stopped while starting: see {process.log}")
        time.sleep(0.25)
    raise LocalFleetError(f"{what} was not ready after {seconds:.0f} s: see {process.log}")


def _tcp_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def admin_get(cluster: LocalCluster, pki: pki_.Pki, path: str, timeout: float = 2) -> bytes:
    """A GET of one of the API server's own paths (`/readyz`, `/metrics`) as the admin, over loopback; OSError when it
    does not answer 200."""
    import ssl
    import urllib.request

    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(pki.admin[0]), str(pki.admin[1]))
    with urllib.request.urlopen(f"{cluster.server}{path}", context=context, timeout=timeout) as answer:
        return answer.read()


def _readyz(cluster: LocalCluster, pki: pki_.Pki) -> bool:
    try:
        admin_get(cluster, pki, "/readyz")
        return True
    except OSError:
        return False


def start_etcd(fleet: LocalFleet, tools: Toolchain) -> None:
    if fleet.etcd and fleet.etcd.alive():
        return
    client, peer = free_port(), free_port()
    data = fleet.folder / "etcd"
    fleet.etcd_port = client
    fleet.etcd = _start("etcd", [
        str(tools.binary("etcd")), "--name=local", f"--data-dir={data}",
        f"--listen-client-urls=http://127.0.0.1:{client}", f"--advertise-client-urls=http://127.0.0.1:{client}",
        f"--listen-peer-urls=http://127.0.0.1:{peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-cluster=local=http://127.0.0.1:{peer}", "--unsafe-no-fsync", "--log-level=warn",
        "--auto-compaction-retention=1", "--quota-backend-bytes=8589934592"], fleet.folder / "logs")
    fleet.save()
    _wait("etcd", lambda: _tcp_open(client), fleet.etcd, 60)


def start_cluster(fleet: LocalFleet, name: str, tools: Toolchain, pki: pki_.Pki, stages: Path,
                  prepare: Callable[[LocalCluster], None]) -> LocalCluster:
    """The cluster's control plane and kwok; its kubeconfig written. `prepare` runs once its API server is ready and
    before kwok starts (kwok resolves the kinds its Stages name when it starts: their CRDs must be served)."""
    folder = fleet.folder / name
    folder.mkdir(parents=True, exist_ok=True)
    old = fleet.clusters.get(name)
    port = old.port if old and not _tcp_open(old.port) else free_port()
    kubeconfig = folder / "kubeconfig"
    cluster = LocalCluster(name, port, str(kubeconfig))
    fleet.clusters[name] = cluster
    fd = os.open(kubeconfig, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(pki_.kubeconfig(pki, name, cluster.server))
    logs = fleet.folder / "logs"
    serving_cert, serving_key = pki.serving
    sa_pub, sa_key = pki.service_accounts
    apiserver = _start(f"{name}-kube-apiserver", [
        str(tools.binary("kube-apiserver")), f"--etcd-servers=http://127.0.0.1:{fleet.etcd_port}",
        f"--etcd-prefix=/clusters/{name}", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={port}", f"--tls-cert-file={serving_cert}", f"--tls-private-key-file={serving_key}",
        f"--client-ca-file={pki.ca}", "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={sa_pub}", f"--service-account-signing-key-file={sa_key}",
        f"--service-cluster-ip-range={SERVICE_RANGE}", "--authorization-mode=Node,RBAC", "--allow-privileged=true",
        # the reconciler would write the loopback address into the `kubernetes` Endpoints, which validation refuses
        "--endpoint-reconciler-type=none", "--enable-priority-and-fairness=false",
        f"--cert-dir={folder / 'certs'}"], logs)
    cluster.processes.append(apiserver)
    fleet.save()
    _wait(f"{name}'s kube-apiserver", lambda: _readyz(cluster, pki), apiserver, 120)
    prepare(cluster)
    common = [f"--kubeconfig={kubeconfig}", "--leader-elect=false", "--bind-address=127.0.0.1"]
    cluster.processes.append(_start(f"{name}-kube-controller-manager", [
        str(tools.binary("kube-controller-manager")), *common, f"--secure-port={free_port()}",
        f"--service-account-private-key-file={sa_key}", f"--root-ca-file={pki.ca}",
        "--use-service-account-credentials=false", f"--cluster-signing-cert-file={pki.ca}",
        f"--cluster-signing-key-file={pki.ca_key}", "--controllers=*"], logs))
    cluster.processes.append(_start(f"{name}-kube-scheduler", [
        str(tools.binary("kube-scheduler")), *common, f"--secure-port={free_port()}"], logs))
    cluster.processes.append(_start(f"{name}-kwok", [
        str(tools.binary("kwok")), f"--kubeconfig={kubeconfig}", f"--config={stages}",
        "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        f"--cidr={POD_RANGE}", f"--node-ip={NODE_ADDRESS}", "--node-lease-duration-seconds=40",
        f"--server-address=127.0.0.1:{free_port()}"], logs))
    cluster.processes.append(start_lws(fleet, cluster, tools, pki))
    fleet.save()
    return cluster


LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"


def start_lws(fleet: LocalFleet, cluster: LocalCluster, tools: Toolchain, pki: pki_.Pki) -> Process:
    """The real LeaderWorkerSet controller (it makes a LeaderWorkerSet's StatefulSets and reports its Available
    condition, which llm-d stacks wait for), run on this machine against the cluster's API server.

    The platform stack installs its CRD (the LWS chart), so it starts once the CRD is served and again whenever it
    exits (its informers need the kinds). Its admission webhooks (defaulting a LeaderWorkerSet, labelling its pods)
    are served on loopback and registered by URL (`lifecycle.lws_webhooks`): the API server dials 127.0.0.1 only.
    Its own certificate management is off; it serves the API server's certificate, which names 127.0.0.1."""
    folder = fleet.folder / cluster.name / "lws"
    certs = folder / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    for name, source in (("tls.crt", pki.serving[0]), ("tls.key", pki.serving[1])):
        link = certs / name
        link.unlink(missing_ok=True)
        link.symlink_to(source)
    if not cluster.lws_webhook_port or _tcp_open(cluster.lws_webhook_port):
        cluster.lws_webhook_port = free_port()
    config = folder / "config.yaml"
    config.write_text(json.dumps({
        "apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": cluster.lws_webhook_port, "certDir": str(certs)},
        "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": f"127.0.0.1:{free_port()}"}}))
    loop = ('while :; do until "$0" get crd ' + LWS_CRD + ' >/dev/null 2>&1; do sleep 3; done; '
            '"$1" --config="$2"; sleep 2; done')
    return _start(f"{cluster.name}-lws-controller", ["/bin/sh", "-c", loop, str(tools.binary("kubectl")),
                                                     str(tools.binary("lws-controller")), str(config)],
                  fleet.folder / "logs", env={"KUBECONFIG": cluster.kubeconfig})


def stop(fleet: LocalFleet, grace: float = 10.0) -> list[str]:
    """Stops every process of the fleet (SIGTERM, then SIGKILL after `grace`); returns what was running."""
    processes = [p for c in fleet.clusters.values() for p in reversed(c.processes)]
    processes += [fleet.etcd] if fleet.etcd else []
    running = [p for p in processes if p.alive()]
    for p in running:
        _signal(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(p.alive() for p in running):
        time.sleep(0.1)
    for p in running:
        if p.alive():
            _signal(p.pid, signal.SIGKILL)
    for p in running:  # reaped, when this process started them
        try:
            os.waitpid(p.pid, os.WNOHANG)
        except ChildProcessError:
            pass
    return [p.name for p in running]


def stop_cluster(fleet: LocalFleet, name: str, grace: float = 10.0) -> list[str]:
    """Stops one cluster's processes (its API server, controller-manager, scheduler and kwok): its API server is gone,
    as a deleted cluster's is. etcd, which serves every cluster, keeps running, and keeps the cluster's objects: `up`
    starts it again with them. Returns what was running."""
    cluster = fleet.clusters.get(name)
    return stop(LocalFleet(fleet.folder, clusters={name: cluster}), grace) if cluster is not None else []


def _signal(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # its session's group: anything it started too
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
