"""What the real `up` costs: the first `up`, a no-op `up` (twice: the record read back from the backend, then cached)
and one changed deployment, with the real Pulumi CLI and Kubernetes provider on a local fleet (docs/local-fleet.md),
against the program-running CLI double's figures on the same fleet (benchmarks/up_scale.py), per stack, and where
the time goes. Issue 59, item 8.

The fleet (`generate`): N Existing clusters with one or two GPU pools of local-fleet/'s InferenceClasses and devices
to spare, a Traefik gateway, M small single-GPU native ModelDeployments over three teams and two ModelServices. The
deployment changed is one whose pool keeps a free device once the plan's replicas hold theirs: its rolling update's
surge pod needs one (else `up` waits for the pod's readiness timeout, an hour). `modelplane local up` starts it; every
figure is a `modelplane` command in a process of its own, run as a user runs it; `local down` always ends the real
part (nothing keeps running). The double's runs come after it, on the same manifests, with nothing else of the
benchmark running.

How each figure is taken, and which are derived:

- every `pulumi` process `modelplane` starts goes through a shell shim (`SHIM`) that records its wall time (start
  and end, `date +%s%N`), its command and its stack: per-stack and per-command figures are those (direct). A
  stack's time is its `pulumi up` process; its "all calls" time runs from its first CLI call to its last.
- each real `pulumi up` also writes the CLI's OpenTelemetry trace (`--otel-traces file://`, which the shim adds),
  whose spans split it (direct, from the engine's own clock): before the engine (the CLI, the backend, the stack
  and its secrets, up to the update's start), the program until the provider is needed, plugin load (the
  provider's process started, and its Configure), the provider's step calls (Check, Diff, Create, Update, Delete,
  Read; their sums overlap when steps run in parallel), stack references read, and after the engine (the last
  checkpoint, exit). "Process start" is the process's wall time less its root span (derived: the Go runtime and
  the CLI's package initialisation, before the CLI's first clock reading).
- "modelplane alone" is the command's wall time during which no `pulumi` process of it ran (derived).
- apart from the runs: `pulumi version`, `stack ls`, `stack select` and `stack output` against the run's file
  backend, each timed alone (median of 5); a trivial inline program through the automation API, as `modelplane`
  runs its own: nothing, then one ConfigMap created, then unchanged (with and without the trace, which is its cost).
- the API servers' own `/metrics` (apiserver_request_duration_seconds _sum and _count per verb, WATCH and CONNECT
  left out: they last as long as the watch), read over loopback with the admin's certificate before and after each
  phase, summed over the clusters, with the idle rate (kwok's heartbeats, the controllers) measured over a quiet
  window before the first `up` for comparison.
- the slowest stacks' update times from the backend's history (`pulumi stack history --json`, whole seconds), to
  check the shim's.

The traces hold the providers' gRPC requests (so the local clusters' kubeconfigs): they stay in the benchmark's
private temporary folder and go with it. Asserts nothing: a benchmark. The machine's load averages are printed
before and after; on a shared machine the figures are the machine's at that load.

    .venv/bin/python benchmarks/real_up_cost.py                                  # 2 clusters x 10 deployments
    .venv/bin/python benchmarks/real_up_cost.py --clusters 10 --deployments 100  # about an hour on 2 busy cores
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from automation.projects import project_of  # noqa: E402
from automation.local import control_plane, toolchain  # noqa: E402
from automation.local.pki import Pki  # noqa: E402
from benchmarks.up_scale import MODELPLANE, Fleet as DoubleFleet, change_images, command  # noqa: E402
from fleet.stack_id import StackId  # noqa: E402

API = "modelplane.ai/v1alpha1"
TEAMS = ("ml-team", "search", "assistants")
PASSPHRASE = "real-up-cost"
ENGINE_VERBS = ("up", "preview", "destroy", "refresh")
STEP_METHODS = ("Check", "Diff", "Create", "Update", "Delete", "Read")
HOUR = 3600.0

# In front of the Pulumi CLI (or the double): one line per call in $REAL_UP_COST_LOG (start and end in ns, exit code,
# the command's first two words, its --stack, the trace file); an engine run also writes the CLI's trace when
# $REAL_UP_COST_TRACES is set. The command's own arguments are never written (config values are among them).
SHIM = r"""#!/bin/sh
trap : INT TERM  # an interrupted command's line is still written (the CLI itself gets the signal too)
start=$(date +%s%N)
verb= sub= stack= prev=
for a do
  if [ "$prev" = --stack ]; then stack=${a##*/}
  else case $a in
    -*) ;;
    *) if [ -z "$verb" ]; then verb=$a; elif [ -z "$sub" ] && [ "$prev" = "$verb" ]; then sub=$a; fi ;;
  esac; fi
  prev=$a
done
trace=-
if [ -n "$REAL_UP_COST_TRACES" ]; then case $verb in up|preview|destroy|refresh)
  trace="$REAL_UP_COST_TRACES/$start-$$.json"; set -- "$@" --otel-traces "file://$trace" ;;
esac; fi
"$REAL_UP_COST_PULUMI" "$@"
code=$?
echo "$start $(date +%s%N) $code ${verb:--} ${sub:--} ${stack:--} $trace" >> "$REAL_UP_COST_LOG"
exit $code
"""


# ---- the fleet ---------------------------------------------------------------------------------------------------


def generate(deployments: int, clusters: int) -> list[dict]:
    """Existing clusters only (a local fleet runs only those), local-fleet/'s two InferenceClasses, a Traefik gateway,
    `deployments` single-GPU native ModelDeployments over three teams and a ModelService for each of two of them."""
    classes = [o for o in yaml.safe_load_all((ROOT / "local-fleet" / "fleet.yaml").read_text())
               if o and o["kind"] == "InferenceClass"]
    l4 = {"name": "l4", "className": "local-l4", "nodeCount": -(-deployments // clusters) + 2}
    objects: list[dict] = list(classes)
    for i in range(clusters):
        name = f"local-{i:02d}"
        pools = [dict(l4)] + ([{"name": "h100", "className": "local-h100", "nodeCount": 1}] if i % 2 else [])
        objects.append({"apiVersion": API, "kind": "InferenceCluster",
                        "metadata": {"name": name, "labels": {"region": ("eu", "us")[i % 2]}},
                        "spec": {"cluster": {"source": "Existing",
                                             "existing": {"secretRef": {"name": f"{name}-kubeconfig"}}},
                                 "nodePools": pools}})
    objects.append({"apiVersion": API, "kind": "InferenceGateway", "metadata": {"name": "default"},
                    "spec": {"backend": "Traefik", "traefik": {"version": "40.2.0"}}})
    memory = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0'
    for i in range(deployments):
        member = {"role": "Standalone",
                  "nodeSelector": {"devices": [{"name": "gpu", "count": 1, "selectors": [{"cel": memory}]}]},
                  "template": {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0",
                                                        "args": [f"--model=example/model-{i}"]}]}}}
        objects.append({"apiVersion": API, "kind": "ModelDeployment",
                        "metadata": {"name": f"model-{i:03d}", "namespace": TEAMS[i % len(TEAMS)]},
                        "spec": {"replicas": 1, "template": {"spec": {"engines": [{"name": "vllm",
                                                                                    "members": [member]}]}}}})
    for i in range(min(2, deployments)):
        objects.append({"apiVersion": API, "kind": "ModelService",
                        "metadata": {"name": "chat", "namespace": TEAMS[i]},
                        "spec": {"endpoints": [{"selector": {"matchLabels": {
                            "modelplane.ai/deployment": f"model-{i:03d}"}}}]}})
    return objects


def spare_devices(plan: dict, objects: list[dict]) -> dict[tuple[str, str], int]:
    """Free devices per (cluster, pool) once the plan's replicas hold theirs."""
    per_node = {o["metadata"]["name"]: sum(d["count"] for d in o["spec"]["devices"])
                for o in objects if o["kind"] == "InferenceClass"}
    free = {(o["metadata"]["name"], p["name"]): p["nodeCount"] * per_node[p["className"]]
            for o in objects if o["kind"] == "InferenceCluster" for p in o["spec"]["nodePools"]}
    for replica in plan["replicas"]:
        for engine in replica["engines"]:
            for member in engine["members"]:
                free[(replica["cluster"], member["pool"])] -= member["nodes"] * sum(member["devices"].values())
    return free


# ---- what the shim recorded ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    start: int  # ns, wall clock
    end: int
    code: int
    command: str  # "up", "stack select", "version", ...
    stack: str  # "" when the call names none
    trace: str  # the trace file of an engine run, else ""

    @property
    def seconds(self) -> float:
        return (self.end - self.start) / 1e9

    @property
    def kind(self) -> str:
        return kind_of(self.stack)


def kind_of(stack: str) -> str:
    try:
        return str(StackId.parse(stack).kind)
    except ValueError:
        return "other"


def read_calls(log: Path) -> list[Call]:
    out = []
    for line in log.read_text().splitlines() if log.is_file() else []:
        start, end, code, verb, sub, stack, trace = line.split(" ")
        words = [w for w in (verb, sub) if w != "-"]
        if verb not in ("stack", "config", "plugin", "state") and words:
            words = words[:1]  # `up --parallel 2`: the second word is a flag's value
        out.append(Call(int(start), int(end), int(code), " ".join(words), "" if stack == "-" else stack,
                        "" if trace == "-" else trace))
    return sorted(out, key=lambda c: c.start)


# ---- the traces ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    start: int
    end: int
    attributes: dict

    @property
    def seconds(self) -> float:
        return (self.end - self.start) / 1e9


PART = r'(?:[^:"]|:(?!:))+'  # a URN's part: no "::" in it
URN_TYPE = re.compile(rf'urn:pulumi:{PART}::{PART}::({PART})::')  # the type chain; the resource's own type is its last


def read_spans(path: Path) -> list[Span]:
    """The spans of one OTLP JSON file (one export batch a line), without their stack traces."""
    spans = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        for resource in json.loads(line).get("resourceSpans", []):
            service = next((a["value"].get("stringValue", "") for a in resource["resource"].get("attributes", [])
                            if a["key"] == "service.name"), "")
            for scope in resource.get("scopeSpans", []):
                for s in scope.get("spans", []):
                    attributes: dict = {}
                    for a in s.get("attributes", []):
                        if a["key"] != "code.stacktrace":
                            attributes.setdefault(a["key"], []).append(next(iter(a["value"].values()), None))
                    spans.append(Span(service, s["name"], int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"]),
                                      attributes))
    return spans


# One `pulumi up` process, partitioned by its trace: process start (its wall less the root span: derived), then the
# root span's parts (direct): before the engine's update, the update (split into the program until the provider is
# needed, the provider's process started, its Configure, and the rest: steps, readiness waits), after the update.
PARTS = ("start", "before", "program", "plugin", "configure", "rest", "after")
PART_TITLES = {"start": "process start (derived: wall - root span)",
               "before": "before the update: CLI, backend, stack, config, secrets",
               "program": "the update until the provider is needed: the program, stack references",
               "plugin": "plugin load: the provider's process started",
               "configure": "plugin load: the provider's Configure",
               "rest": "the rest of the update: steps, readiness waits, checkpoints",
               "after": "after the update: last checkpoint, exit"}


@dataclass
class UpParts:
    """One `pulumi up` process (seconds): its wall, its partition (`PARTS`; empty without a trace) and what ran
    inside it, concurrently: the provider's step calls by method and by resource type, stack references read."""

    wall: float
    parts: dict[str, float] = field(default_factory=dict)
    stack_references: float = 0.0
    providers: int = 0  # provider processes started
    steps: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    steps_by_type: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))


def split(call: Call) -> UpParts:
    out = UpParts(call.seconds)
    spans = read_spans(Path(call.trace)) if call.trace else []
    cli = [s for s in spans if s.service == "pulumi-cli"]
    root = next((s for s in cli if s.name == "pulumi"), None)
    update = next((s for s in cli if s.name == "pulumi-plan"), None)
    program = next((s for s in cli if s.name == "run-program"), None)
    plugins = [s for s in cli if s.name == "newPlugin" and s.attributes.get("kind") == ["resource"]]
    configure = [s for s in cli if s.name == "pulumirpc.ResourceProvider/Configure"]
    if root is not None and update is not None:
        first = min((p.start for p in plugins), default=update.end)
        plugin = sum(p.seconds for p in plugins)
        configured = sum(s.seconds for s in configure)
        until = (first - (program.start if program else update.start)) / 1e9
        out.parts = {"start": max(0.0, call.seconds - root.seconds), "before": (update.start - root.start) / 1e9,
                     "program": until, "plugin": plugin, "configure": configured,
                     "rest": update.seconds - until - plugin - configured, "after": (root.end - update.end) / 1e9}
    out.stack_references = sum(s.seconds for s in cli if s.name == "builtinProvider.readStackReference")
    out.providers = len(plugins)
    for s in cli:
        method = s.name.rsplit("/", 1)[-1]
        if s.name.startswith("pulumirpc.ResourceProvider/") and method in STEP_METHODS:
            out.steps[method].append(s.seconds)
    for s in spans:  # the provider's own spans carry the request, so the resource's type
        method = s.name.rsplit("/", 1)[-1]
        if s.service == "pulumi-resource-provider" and method in ("Create", "Update", "Delete"):
            found = URN_TYPE.search(str(s.attributes.get("Msg", [""])[0]).replace("\\", ""))
            kind = found.group(1).rsplit("$", 1)[-1].removeprefix("kubernetes:") if found else "?"
            out.steps_by_type[(method, kind)].append(s.seconds)
    return out


# ---- a working folder ------------------------------------------------------------------------------------------------


@dataclass
class Phase:
    label: str
    engine: str  # "real" or "double"
    seconds: float
    code: int
    error: str
    calls: list[Call]
    start: int  # ns
    end: int
    expected: set[str] | None = None  # the stacks that should run, when known
    metrics: Served | None = None  # what the API servers served during the phase

    @property
    def engines(self) -> list[str]:
        return [c.stack for c in self.calls if c.command in ENGINE_VERBS]

    def note(self) -> str:
        text = f"exit {self.code}" + (f" {self.error}" if self.code else "")
        if self.expected is not None:
            ran = set(self.engines)
            text += ("; no engine ran" if not ran else "; exactly the changed stacks") if ran == self.expected else (
                f"; ran {sorted(ran - self.expected)[:3]} not expected, {sorted(self.expected - ran)[:3]} missing")
        return text


class Work:
    """A working folder whose `pulumi` calls go through the shim: the fleet's manifests, the command's environment."""

    def __init__(self, folder: Path, work: Path, env: dict[str, str], pulumi: Path, shim_dir: Path,
                 traces: bool, engine: str):
        self.folder, self.work, self.engine = folder, work, engine
        self.state = work / ".modelplane"  # the default state folder: the backend, the stacks' workspaces, the fleet
        self.log = folder / "pulumi-calls.log"
        self.traces = folder / "traces"
        self.traces.mkdir(exist_ok=True)
        self.env = {**env, "PATH": f"{shim_dir}{os.pathsep}{env['PATH']}", "REAL_UP_COST_PULUMI": str(pulumi),
                    "REAL_UP_COST_LOG": str(self.log), "REAL_UP_COST_TRACES": str(self.traces) if traces else ""}

    def write(self, objects: list[dict]) -> None:
        (self.work / "fleet.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=False))

    def run(self, label: str, *args: str, timeout: float = 4 * HOUR, expected: set[str] | None = None,
            scrape: Callable[[], Served] | None = None) -> Phase:
        before = scrape() if scrape else None
        mark = len(read_calls(self.log))
        start = time.time_ns()
        said = self.folder / f"{self.engine}-{label.replace(' ', '-').replace(',', '')}.stderr"
        seconds, code, error = command(self.work, self.env, args, timeout, stderr_to=said)
        end = time.time_ns()
        phase = Phase(label, self.engine, seconds, code, error, read_calls(self.log)[mark:], start, end, expected)
        if scrape and before is not None:
            after = scrape()
            phase.metrics = delta(after, before)
        print(f"  {engine_label(phase)} {label}: {seconds:.1f} s, {len(phase.engines)} stack(s) run, "
              f"{len(phase.calls)} CLI call(s); {phase.note()}", flush=True)
        if code:  # what the command said last, to see why
            for line in said.read_text().strip().splitlines()[-12:]:
                print(f"      | {line[:240]}", flush=True)
        return phase


def engine_label(phase: Phase) -> str:
    return f"[{phase.engine}]"


def install_shim(folder: Path) -> Path:
    """The shim as `<folder>/shim/bin/pulumi` (where the automation API's PulumiCommand(root=...) looks); its folder."""
    shim_dir = folder / "shim" / "bin"
    shim_dir.mkdir(parents=True)
    path = shim_dir / "pulumi"
    path.write_text(SHIM)
    path.chmod(0o755)
    return shim_dir


# ---- the API servers ----------------------------------------------------------------------------------------------

METRIC = re.compile(r'^apiserver_request_duration_seconds_(sum|count)\{([^}]*)\} (\S+)$')
LABEL = re.compile(r'(\w+)="([^"]*)"')
Served = dict[tuple[str, str], tuple[float, float]]  # (verb, resource[/subresource]) -> (requests, seconds)


def apiserver_metrics(state: Path) -> Served:
    """What the local fleet's API servers have served so far, summed over them (WATCH and CONNECT left out: their
    duration is the watch's)."""
    local = control_plane.LocalFleet.load(control_plane.local_folder(state))
    pki = Pki(local.folder / "pki")
    out: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for cluster in local.clusters.values():
        try:
            text = control_plane.admin_get(cluster, pki, "/metrics", timeout=30).decode()
        except OSError as exc:  # counted as nothing served: said, so a gap is never read as idle
            print(f"  [real] {cluster.name}'s /metrics did not answer ({type(exc).__name__}: {exc})", flush=True)
            continue
        for line in text.splitlines():
            found = METRIC.match(line)
            if not found:
                continue
            labels = dict(LABEL.findall(found.group(2)))
            verb = labels.get("verb", "")
            if verb in ("WATCH", "CONNECT", "WATCHLIST"):
                continue
            what = "/".join(x for x in (labels.get("resource"), labels.get("subresource")) if x) or "?"
            out[(verb, what)][0 if found.group(1) == "count" else 1] += float(found.group(3))
    return {key: (count, seconds) for key, (count, seconds) in out.items()}


def delta(after: Served, before: Served) -> Served:
    return {key: (n - before.get(key, (0, 0))[0], t - before.get(key, (0, 0))[1]) for key, (n, t) in after.items()}


def served_line(served: Served, seconds: float) -> str:
    """Requests and seconds served, by verb, and the costliest (verb, resource)s."""
    by_verb: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for (verb, _), (count, spent) in served.items():
        by_verb[verb][0] += count
        by_verb[verb][1] += spent
    total, spent = sum(c for c, _ in by_verb.values()), sum(t for _, t in by_verb.values())
    verbs = ", ".join(f"{verb} {count:.0f} / {t:.1f} s" for verb, (count, t)
                      in sorted(by_verb.items(), key=lambda kv: -kv[1][1]) if count)
    top = ", ".join(f"{verb} {what} {count:.0f} / {t:.1f} s" for (verb, what), (count, t)
                    in sorted(served.items(), key=lambda kv: -kv[1][1])[:4] if count)
    return f"{total:.0f} requests, {spent:.1f} s served in {seconds:.0f} s: {verbs}\n{'':>37}costliest: {top}"


# ---- measured apart ---------------------------------------------------------------------------------------------


def timed(argv: list[str], cwd: Path, env: dict[str, str], runs: int = 5) -> float | None:
    """The median wall time of a command run `runs` times; None when it failed."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=300)
        if done.returncode != 0:
            return None
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cli_start(work: Work, stack: str) -> list[tuple[str, float | None]]:
    """The CLI's own cost, each command timed alone against the run's file backend (no shim, no trace)."""
    pulumi = work.env["REAL_UP_COST_PULUMI"]
    env = {**work.env, "PULUMI_BACKEND_URL": f"file://{work.state / 'backend'}"}
    where = work.state / "stacks" / stack  # the stack's workspace: its Pulumi.yaml
    return [("pulumi version", timed([pulumi, "version"], where, env)),
            ("pulumi stack ls --json (the project's stacks)", timed([pulumi, "stack", "ls", "--json"], where, env)),
            (f"pulumi stack select {stack}", timed([pulumi, "stack", "select", stack], where, env)),
            (f"pulumi stack output --json --stack {stack} (decrypts)",
             timed([pulumi, "stack", "output", "--json", "--stack", stack], where, env))]


TRIVIAL_RUNS = 3  # runs of each unchanged `up`, taken in turns with and without the trace


def trivial_programs(work: Work, folder: Path, kubeconfig: Path) -> list[tuple[str, float, float | None]]:
    """(what, the automation API's `up` wall, its `pulumi up` process) for an inline program, as `modelplane` runs
    its programs: nothing; one ConfigMap created; then unchanged, with and without the trace in turns (medians of
    TRIVIAL_RUNS: the difference is the trace's cost). Destroyed after."""
    import pulumi
    import pulumi_kubernetes as k8s
    from pulumi import automation as auto

    backend = folder / "backend"
    backend.mkdir(parents=True)
    env = {k: v for k, v in work.env.items() if k.startswith(("PULUMI_", "REAL_UP_COST_"))}
    env.update({"PULUMI_BACKEND_URL": f"file://{backend}", "PATH": work.env["PATH"]})
    saved = dict(os.environ)
    os.environ.update(env)  # the SDK starts `pulumi version` with this process's environment
    shim = auto.PulumiCommand(root=str(Path(env["PATH"].split(os.pathsep)[0]).parent))

    def empty() -> None:
        pulumi.export("nothing", 0)

    def one() -> None:
        provider = k8s.Provider("local", kubeconfig=pulumi.Output.secret(kubeconfig.read_text()))
        k8s.core.v1.ConfigMap("probe", metadata={"name": "real-up-cost-probe", "namespace": "default"},
                              data={"probe": "1"}, opts=pulumi.ResourceOptions(provider=provider))

    def stack_of(name: str, program):
        (folder / name).mkdir()
        return auto.create_or_select_stack(
            stack_name=name, project_name="real-up-cost", program=program,
            opts=auto.LocalWorkspaceOptions(
                work_dir=str(folder / name), env_vars=dict(env), pulumi_command=shim,
                project_settings=auto.ProjectSettings(name="real-up-cost", runtime="python",
                                                      backend=auto.ProjectBackend(url=env["PULUMI_BACKEND_URL"])),
                secrets_provider="passphrase"))

    def up(stack, traced: bool) -> tuple[float, float | None]:
        stack.workspace.env_vars = {**stack.workspace.env_vars,
                                    "REAL_UP_COST_TRACES": env["REAL_UP_COST_TRACES"] if traced else ""}
        mark = len(read_calls(work.log))
        start = time.perf_counter()
        stack.up(on_event=lambda _: None, color="never")
        seconds = time.perf_counter() - start
        ups = [c.seconds for c in read_calls(work.log)[mark:] if c.command == "up"]
        return seconds, ups[0] if ups else None

    def median(runs: list[tuple[float, float | None]]) -> tuple[float, float | None]:
        processes = [p for _, p in runs if p is not None]
        return statistics.median(w for w, _ in runs), statistics.median(processes) if processes else None

    out: list[tuple[str, float, float | None]] = []
    try:
        nothing = stack_of("empty", empty)
        out.append(("nothing", *up(nothing, traced=True)))
        nothing.destroy(color="never")
        probe = stack_of("one", one)
        out.append(("one ConfigMap, created", *up(probe, traced=True)))
        runs: dict[bool, list[tuple[float, float | None]]] = {True: [], False: []}
        for _ in range(TRIVIAL_RUNS):
            for traced in (True, False):
                runs[traced].append(up(probe, traced))
        out.append((f"one ConfigMap, unchanged (median of {TRIVIAL_RUNS})", *median(runs[True])))
        out.append((f"one ConfigMap, unchanged, no trace (median of {TRIVIAL_RUNS})", *median(runs[False])))
        probe.destroy(color="never")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return out


def history_seconds(work: Work, stack: str, start: int, end: int) -> float | None:
    """endTime - startTime of the stack's update that began within [start, end] (ns), from the backend's history
    (`pulumi stack history --json`, whole seconds)."""
    env = {**work.env, "PULUMI_BACKEND_URL": f"file://{work.state / 'backend'}"}
    done = subprocess.run([work.env["REAL_UP_COST_PULUMI"], "stack", "history", "--json", "--stack",
                           f"organization/{project_of(kind_of(stack))}/{stack}"],
                          cwd=work.folder, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not done.stdout.strip():
        return None

    def stamp(value) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        from datetime import datetime

        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()

    for update in json.loads(done.stdout):
        if start / 1e9 - 2 <= stamp(update["startTime"]) <= end / 1e9 + 2:
            return stamp(update["endTime"]) - stamp(update["startTime"])
    return None


# ---- printing ---------------------------------------------------------------------------------------------------


def quantiles(values: Iterable[float]) -> tuple[int, float, float, float, float]:
    """(count, median, p90, max, sum)"""
    ordered = sorted(values)
    if not ordered:
        return 0, 0.0, 0.0, 0.0, 0.0
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return len(ordered), statistics.median(ordered), p90, ordered[-1], sum(ordered)


def stats(values: Iterable[float]) -> str:
    n, median, p90, top, total = quantiles(values)
    return f"{n:>5} {median:8.2f} {p90:8.2f} {top:8.2f} {total:9.1f}" if n else f"{0:>5}"


def busy_seconds(calls: list[Call], start: int, end: int) -> float:
    """Seconds within [start, end] when at least one of the calls ran (the union of their intervals)."""
    total, reach = 0, start
    for call in sorted(calls, key=lambda c: c.start):
        lo, hi = max(call.start, reach), min(call.end, end)
        if hi > lo:
            total += hi - lo
        reach = max(reach, call.end)
    return total / 1e9


def report(phases: list[Phase], work: dict[str, Work]) -> None:
    print("\n== every phase: the command's wall time ==")
    print(f"{'phase':<34} {'engine':<7} {'seconds':>8} {'stacks':>6} {'calls':>6} {'pulumi busy':>11} "
          f"{'modelplane alone':>16}  note")
    for p in phases:
        busy = busy_seconds(p.calls, p.start, p.end)
        print(f"{p.label:<34} {p.engine:<7} {p.seconds:8.1f} {len(p.engines):>6} {len(p.calls):>6} {busy:11.1f} "
              f"{max(0.0, p.seconds - busy):16.1f}  {p.note()}")

    print("\n== per stack: its `pulumi up` process, seconds (the shim's wall time), by kind ==")
    print(f"{'phase':<34} {'engine':<7} {'kind':<10} {'count':>5} {'median':>8} {'p90':>8} {'max':>8} {'sum':>9}"
          f"   all its CLI calls: {'median':>8} {'p90':>8} {'max':>8}")
    for p in phases:
        by_kind: dict[str, list[Call]] = defaultdict(list)
        for c in p.calls:
            if c.command == "up":
                by_kind[c.kind].append(c)
        spans = stack_spans(p)
        for kind, calls in sorted(by_kind.items(), key=lambda kv: order(kv[0])):
            whole = [spans[c.stack] for c in calls if c.stack in spans]
            _, median, p90, top, _ = quantiles(whole)
            print(f"{p.label:<34} {p.engine:<7} {kind:<10} {stats(c.seconds for c in calls)}   "
                  f"{'':>19} {median:8.2f} {p90:8.2f} {top:8.2f}")

    print("\n== the slowest stacks (real engine); history: the backend's endTime - startTime, whole seconds ==")
    for p in phases:
        if p.engine != "real":
            continue
        spans = stack_spans(p)
        ups = sorted((c for c in p.calls if c.command == "up"), key=lambda c: -c.seconds)[:5]
        for c in ups:
            history = history_seconds(work["real"], c.stack, p.start, p.end)
            print(f"{p.label:<34} {c.stack:<40} up {c.seconds:7.2f} s  all calls {spans.get(c.stack, 0):7.2f} s  "
                  f"history {'-' if history is None else f'{history:.0f}'} s")

    print("\n== CLI calls by command, every phase (in place, under the run's own concurrency) ==")
    print(f"{'engine':<7} {'command':<18} {'count':>5} {'median':>8} {'p90':>8} {'max':>8} {'sum':>9}")
    for engine in ("real", "double"):
        by_command: dict[str, list[float]] = defaultdict(list)
        for p in phases:
            if p.engine == engine:
                for c in p.calls:
                    by_command[c.command or "?"].append(c.seconds)
        for name, values in sorted(by_command.items(), key=lambda kv: -sum(kv[1])):
            print(f"{engine:<7} {name:<18} {stats(values)}")

    print("\n== where the time goes: each real stack's `pulumi up` partitioned by its trace, medians per kind (s) ==")
    print("   start = process start (derived); before = the CLI, backend, stack, config and secrets before the update;")
    print("   program = the update until the provider is needed (the program, stack references); plugin = the provider's")
    print("   process started; configure = its Configure; rest = steps and readiness waits (derived: the update less")
    print("   those); after = the last checkpoint and exit; other calls = the stack's other CLI calls (select, init,")
    print("   config, outputs, history), summed; steps = its provider step calls, summed (they overlap); providers =")
    print("   provider processes it started")
    columns = ("up", *PARTS, "other calls", "steps", "providers")
    for p in phases:
        ups = [c for c in p.calls if c.command == "up" and c.trace]
        if p.engine != "real" or not ups:
            continue
        other: dict[str, float] = defaultdict(float)
        for c in p.calls:
            if c.stack and c.command != "up":
                other[c.stack] += c.seconds
        rows: dict[str, list[dict[str, float]]] = defaultdict(list)
        for c in ups:
            x = split(c)
            if x.parts:
                rows[c.kind].append({"up": x.wall, **x.parts, "other calls": other[c.stack],
                                     "steps": sum(sum(v) for v in x.steps.values()), "providers": x.providers})
        print(f"-- {p.label}")
        print(f"   {'kind':<10} {'stacks':>6} " + " ".join(f"{c:>9}" for c in columns))
        for kind, measured in sorted(rows.items(), key=lambda kv: order(kv[0])):
            print(f"   {kind:<10} {len(measured):>6} " + " ".join(
                f"{statistics.median(v[c] for v in measured):9.2f}" for c in columns))
        every = [v for measured in rows.values() for v in measured]
        total = sum(v["up"] for v in every)
        print(f"   {'sum':<10} {len(every):>6} " + " ".join(f"{sum(v[c] for v in every):9.1f}" for c in columns))
        print(f"   {'% of up':<10} {'':>6} " + " ".join(
            f"{100 * sum(v[c] for v in every) / total:9.0f}" if total and c not in ("steps", "providers") else f"{'':>9}"
            for c in columns))
        parts = [split(c) for c in ups]
        print("   the provider's step calls (the engine's spans) and stack references read, each call:")
        for method in STEP_METHODS:
            values = [v for x in parts for v in x.steps.get(method, [])]
            if values:
                print(f"     {method:<54} {stats(values)}")
        references = [x.stack_references for x in parts if x.stack_references]
        if references:
            print(f"     {'stack references read, per stack':<54} {stats(references)}")
        by_type: dict[tuple[str, str], list[float]] = defaultdict(list)
        for x in parts:
            for key, values in x.steps_by_type.items():
                by_type[key].extend(values)
        slow = sorted(by_type.items(), key=lambda kv: -sum(kv[1]))[:8]
        if slow:
            print("   by resource type (the provider's own spans), the 8 costliest:")
            for (method, kind), values in slow:
                print(f"     {method + ' ' + kind:<54} {stats(values)}")

    print("\n== the API servers (apiserver_request_duration_seconds, every cluster; WATCH and CONNECT left out) ==")
    for p in phases:
        if p.metrics:
            print(f"{p.label:<36} {served_line(p.metrics, p.seconds)}")


def stack_spans(phase: Phase) -> dict[str, float]:
    """stack -> seconds from its first CLI call to its last, within the phase."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for c in phase.calls:
        if c.stack:
            first[c.stack] = min(first.get(c.stack, c.start), c.start)
            last[c.stack] = max(last.get(c.stack, c.end), c.end)
    return {s: (last[s] - first[s]) / 1e9 for s in first}


def order(kind: str) -> int:
    kinds = ["platform", "gateway", "team", "cache", "model", "endpoints", "service"]
    return kinds.index(kind) if kind in kinds else len(kinds)


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" ({os.cpu_count()} CPUs)"


# ---- the run --------------------------------------------------------------------------------------------------------


def phases_of(work: Work, objects: list[dict], parallel: int, changed: dict,
              scrape: Callable[[], Served] | None = None) -> list[Phase]:
    """The first `up`, a no-op `up` reading the record back, a no-op `up` with it cached, and `up` after changing
    `changed` (a new image: exactly its model stack should run)."""
    work.write(objects)
    out = [work.run("first up", "up", "--parallel", str(parallel), scrape=scrape)]
    if out[0].code:
        return out
    out.append(work.run("no-op up, record read back", "up", "--parallel", str(parallel), expected=set(),
                        scrape=scrape))
    out.append(work.run("no-op up, record cached", "up", "--parallel", str(parallel), expected=set(), scrape=scrape))
    expected = change_images([changed], 1, "v0.12.0")
    work.write(objects)
    out.append(work.run("one deployment changed", "up", "--parallel", str(parallel), expected=expected,
                        scrape=scrape))
    change_images([changed], 1, "v0.11.0")  # back as it was, for the next engine
    return out


@dataclass
class Apart:
    """What the real part measured besides its phases."""

    local_up: float = 0.0
    idle: Served = field(default_factory=dict)  # what the API servers served over IDLE seconds with nothing running
    changed: dict | None = None  # the deployment changed
    fewest_free: int = 0  # free devices on the fullest pool once the plan's replicas hold theirs
    cli: list[tuple[str, float | None]] = field(default_factory=list)
    trivial: list[tuple[str, float, float | None]] = field(default_factory=list)


IDLE = 30.0  # seconds of an idle local fleet whose API-server traffic is measured


def choose_change(work: Work, objects: list[dict], apart: Apart) -> None:
    """The first deployment whose pool keeps a free device for its rolling update's surge pod (else the update waits
    for its readiness timeout, an hour: workloads/render.py READY_TIMEOUT)."""
    done = subprocess.run([MODELPLANE, "plan", "-f", "fleet.yaml", "-o", "json"], cwd=work.work, env=work.env,
                          capture_output=True, text=True, timeout=600)
    plan = json.loads(done.stdout)
    free = spare_devices(plan, objects)
    placed = {r["deployment"]: (r["cluster"], r["engines"][0]["members"][0]["pool"]) for r in plan["replicas"]}
    deployments = [o for o in objects if o["kind"] == "ModelDeployment"]
    apart.fewest_free = min(free.values()) if free else 0
    apart.changed = next((o for o in deployments if free.get(
        placed.get(f"{o['metadata']['namespace']}/{o['metadata']['name']}", ("", "")), 0) > 0), None)
    if apart.changed is None:
        print("  no deployment's pool has a free device for a rolling update's surge pod: the change will wait for "
              "its readiness timeout; give the pools more nodes", flush=True)
        apart.changed = deployments[0]


def watch(state: Path, stop: threading.Event) -> None:
    """Says when a process of the local fleet goes: none should before `local down`."""
    local = control_plane.LocalFleet.load(control_plane.local_folder(state))
    processes = [p for c in local.clusters.values() for p in c.processes] + ([local.etcd] if local.etcd else [])
    gone: set[int] = set()
    while not stop.wait(5):
        for process in processes:
            if process.pid not in gone and not process.alive():
                gone.add(process.pid)
                print(f"  [watch] {time.strftime('%H:%M:%S')} {process.name} (pid {process.pid}) is gone", flush=True)


def real_part(folder: Path, objects: list[dict], parallel: int, shim_dir: Path,
              logs: Path | None = None) -> tuple[list[Phase], Work, Apart]:
    """`local up`, the phases with the real engine, what is measured apart; `local down` whatever happens. `logs`:
    where the local fleet's logs and the commands' standard error are copied at the end."""
    tools = toolchain.find()
    missing = tools.missing()
    if missing:
        sys.exit(f"the real engine is not built ({', '.join(missing)} missing): run `make toolchain`")
    toolchain.register_provider(tools)  # as `modelplane` does when it puts the built CLI on PATH itself
    (folder / "work").mkdir(parents=True)
    env = toolchain.engine_env(os.environ, PASSPHRASE, folder / "cache")
    env["PULUMI_IGNORE_AMBIENT_PLUGINS"] = "true"  # the registered provider, as `modelplane` itself runs it
    work = Work(folder, folder / "work", env, tools.binary("pulumi"), shim_dir, traces=True, engine="real")
    work.write(objects)
    state = work.state
    apart = Apart()
    phases: list[Phase] = []
    stop = threading.Event()
    try:
        apart.local_up, code, error = command(work.work, work.env, ("local", "up"), timeout=HOUR)
        print(f"  [real] local up: {apart.local_up:.1f} s, exit {code} {error}", flush=True)
        if code:
            return phases, work, apart
        threading.Thread(target=watch, args=(state, stop), daemon=True).start()
        before = apiserver_metrics(state)
        time.sleep(IDLE)
        apart.idle = delta(apiserver_metrics(state), before)
        choose_change(work, objects, apart)
        assert apart.changed is not None
        phases = phases_of(work, objects, parallel, apart.changed, lambda: apiserver_metrics(state))
        if phases and not phases[0].code:
            try:  # what is measured apart never costs the phases' figures
                model = next((c.stack for c in phases[0].calls if c.kind == "model"), "")
                apart.cli = cli_start(work, model)
                apart.trivial = trivial_programs(work, folder / "trivial",
                                                 control_plane.kubeconfig_path(state, "local-00"))
            except Exception as exc:  # noqa: BLE001 (a benchmark: say it and go on)
                print(f"  [real] measuring apart failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        return phases, work, apart
    finally:
        stop.set()
        down = subprocess.run([MODELPLANE, "local", "down"], cwd=work.work, env=work.env, capture_output=True,
                              text=True, timeout=300)
        if logs is not None:
            shutil.copytree(state / "local" / "logs", logs / "local-fleet", dirs_exist_ok=True)
            for stderr in folder.glob("*.stderr"):
                shutil.copy(stderr, logs)
        said = (down.stdout + down.stderr).strip().splitlines()
        print(f"  [real] local down: exit {down.returncode}; {said[-1] if said else ''}", flush=True)


def double_part(folder: Path, objects: list[dict], parallel: int, shim_dir: Path, changed: dict) -> tuple[list[Phase],
                                                                                                            Work]:
    fleet = DoubleFleet(folder, objects)  # the double on PATH, the clusters' kubeconfigs as files
    env = {**fleet.env, "PYTHONPATH": str(ROOT), "MODELPLANE_CACHE_DIR": str(folder / "cache")}
    work = Work(folder, fleet.work, env, folder / "bin" / "pulumi", shim_dir, traces=False, engine="double")
    return phases_of(work, objects, parallel, changed), work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=2)
    parser.add_argument("--deployments", type=int, default=10)
    parser.add_argument("--parallel", type=int, default=2, help="`up --parallel` (the command's default: 2)")
    parser.add_argument("--no-double", dest="double", action="store_false", help="the real engine only")
    parser.add_argument("--logs", type=Path, default=None,
                        help="a folder to keep the local fleet's logs and the commands' standard error in")
    args = parser.parse_args()
    objects = generate(args.deployments, args.clusters)
    began = time.perf_counter()
    print(f"real_up_cost: {args.clusters} clusters x {args.deployments} deployments, --parallel {args.parallel}; "
          f"python {sys.version.split()[0]}; {load_average()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="real-up-cost-") as tmp:
        folder = Path(tmp)
        shim_dir = install_shim(folder)
        phases, real, apart = real_part(folder / "real", objects, args.parallel, shim_dir, args.logs)
        works = {"real": real}
        print(f"{load_average()} after the real engine's part", flush=True)
        if args.double and apart.changed is not None:
            double_phases, works["double"] = double_part(folder / "double", objects, args.parallel, shim_dir,
                                                         apart.changed)
            phases += double_phases
        print(f"\n`modelplane local up` of {args.clusters} cluster(s): {apart.local_up:.1f} s")
        if apart.changed is not None:
            print(f"the changed deployment: {apart.changed['metadata']['namespace']}/"
                  f"{apart.changed['metadata']['name']}; free devices on the fullest pool: {apart.fewest_free}")
        report(phases, works)
        if apart.idle:
            print(f"{'idle, no command running':<36} {served_line(apart.idle, IDLE)}")
        if apart.cli:
            print("\n== the CLI alone (no shim, no trace; against the run's file backend; median of 5) ==")
            for what, seconds in apart.cli:
                print(f"{what:<72} {'failed' if seconds is None else f'{seconds:6.2f} s'}")
        if apart.trivial:
            print("\n== a trivial inline program through the automation API (stack.up's wall; its `pulumi up`) ==")
            for what, seconds, process in apart.trivial:
                print(f"{what:<50} {seconds:6.2f} s   pulumi up {'-' if process is None else f'{process:.2f}'} s")
    print(f"\n{load_average()} at the end; {time.perf_counter() - began:.0f} s in all")


if __name__ == "__main__":
    main()
