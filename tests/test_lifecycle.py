"""Every lifecycle path of `modelplane up/destroy`, through the real CLI, orchestrator and PulumiRunner,
against the Pulumi CLI double (tests/pulumi_double.py) on PATH.

These are contract tests: they assert what the real CLI would be asked, in which order, and what
is recorded; nothing is deployed and no program is run by the double.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml

from automation.cli import main
from tests import pulumi_double
from tests.pulumi_engine import Backend

from tests.manifests import example_documents

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = example_documents()  # examples/, less its v0.3.1 variant (tests/manifests.py)
HF_TOKEN = "hf_never_on_argv_93f1"
GATEWAY = "kubernetes:gateway.networking.k8s.io/v1:Gateway"


@pytest.fixture
def double(tmp_path, monkeypatch):
    """A working directory with the double on PATH; returns a helper to drive and inspect it."""
    return make_driver(tmp_path, monkeypatch)


@pytest.fixture
def applied(tmp_path_factory, monkeypatch, capsys):
    """A driver whose example fleet is already up. The first up runs once per session and is kept as a template;
    each test starts from a copy of it at the same path, because a backend and its workspaces hold absolute paths
    (tests run one at a time in a session, so one path serves them all)."""
    return applied_driver(tmp_path_factory, monkeypatch, capsys)


def applied_driver(tmp_path_factory, monkeypatch, capsys) -> Driver:
    root = tmp_path_factory.getbasetemp() / "applied-fleet"
    template = root.with_name("applied-fleet.template")
    shutil.rmtree(root, ignore_errors=True)
    if template.is_dir():
        shutil.copytree(template, root, symlinks=True)
        driver = make_driver(root, monkeypatch)
    else:
        root.mkdir()
        driver = make_driver(root, monkeypatch)
        assert driver.up() == 0, capsys.readouterr().err
        assert set(driver.recorded()) == EVERY_STACK
        shutil.copytree(root, template, symlinks=True)
    driver.mark = len(driver.calls())
    capsys.readouterr()
    return driver


def make_driver(tmp_path, monkeypatch) -> Driver:
    work = pulumi_double.on_path(tmp_path, monkeypatch, "lifecycle-test")
    monkeypatch.setenv("MODELPLANE_SECRET_ML_TEAM__HF_TOKEN__HF_TOKEN", HF_TOKEN)
    kubeconfig = tmp_path / "byo-eu.yaml"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    return Driver(tmp_path, work, kubeconfig)


class Driver:
    def __init__(self, root: pathlib.Path, work: pathlib.Path, kubeconfig: pathlib.Path):
        self.root, self.work, self.kubeconfig = root, work, kubeconfig
        self.docs = copy.deepcopy(EXAMPLES)

    def fleet(self, docs=None) -> str:
        path = self.work / "fleet.yaml"
        path.write_text(yaml.safe_dump_all(docs if docs is not None else self.docs, sort_keys=False))
        return str(path)

    def args(self, *extra: str) -> list[str]:
        return ["-f", self.fleet(), "--kubeconfig", f"byo-eu={self.kubeconfig}", *extra]

    def up(self, *extra: str) -> int:
        self.mark = len(self.calls())
        return main(["up", *self.args(*extra)])

    def calls(self) -> list[dict]:
        return pulumi_double.calls(self.root / "double")

    def ran(self, verb: str, since: int | None = None) -> list[str]:
        """Stacks on which `verb` ran (in call order) since the last up (or `since`)."""
        calls = self.calls()[self.mark if since is None else since:]
        return [c["stack"] for c in calls if _verb(c["argv"]) == verb]

    def control(self, **settings) -> None:
        (self.root / "double" / "control.json").write_text(json.dumps(settings))

    def recorded(self, backend: pathlib.Path | None = None) -> dict:
        """The record in the backend: stack -> {fingerprint, placements, versions, outputs} (plain outputs), for
        every stack whose program recorded what it applied."""
        return recorded_in(backend or self.work / ".modelplane" / "backend")

    def deployment(self, name: str) -> dict:
        return next(d for d in self.docs if d["kind"] == "ModelDeployment" and d["metadata"]["name"] == name)


def recorded_in(backend: pathlib.Path) -> dict:
    if not (backend / ".pulumi").is_dir():
        return {}
    out = {}
    for project, name in Backend(f"file://{backend}").stacks():
        outputs = pulumi_double.stack_outputs(backend, project, name)
        if "modelplane" in outputs:
            out[name] = {**outputs.pop("modelplane"), "outputs": {k: v for k, v in outputs.items() if k != "kubeconfig"}}
    return out


def _verb(argv: list[str]) -> str:
    args = [a for a in argv if a != "--non-interactive"]
    if args[:1] == ["destroy"] and "--preview-only" in args:
        return "preview-destroy"
    return args[0] if args else ""


EVERY_STACK = {"platform-byo-eu", "platform-eks-us-west", "platform-gke-us-central", "gateway",
               "team-ml-team.byo-eu", "team-ml-team.eks-us-west", "team-ml-team.gke-us-central",
               "cache-ml-team.qwen3-coder", "model-ml-team.kimi-k2", "model-ml-team.qwen3-8b",
               "model-ml-team.qwen3-coder", "endpoints-ml-team", "service-ml-team.kimi-k2", "service-ml-team.qwen3-8b",
               "service-ml-team.qwen3-coder"}


def test_first_up_runs_every_stack_in_dependency_order_and_records_each(double, capsys):
    assert double.up() == 0, capsys.readouterr().err
    order = double.ran("up")
    assert set(order) == EVERY_STACK and len(order) == len(EVERY_STACK)
    position = {name: i for i, name in enumerate(order)}
    assert max(position[s] for s in EVERY_STACK if s.startswith("platform-")) < position["gateway"]
    assert position["cache-ml-team.qwen3-coder"] < position["model-ml-team.qwen3-coder"]
    assert position["model-ml-team.qwen3-8b"] < position["endpoints-ml-team"] < position["service-ml-team.qwen3-8b"]
    assert position["team-ml-team.byo-eu"] < position["model-ml-team.qwen3-coder"]
    assert set(double.recorded()) == EVERY_STACK
    # each stack was created in its own workspace with its project, inline program and event log
    up_calls = [c for c in double.calls() if _verb(c["argv"]) == "up"]
    assert all(any(a.startswith("--client=") for a in c["argv"]) and "--event-log" in c["argv"] for c in up_calls)
    assert {pathlib.Path(c["cwd"]).name for c in up_calls} == EVERY_STACK
    # nothing left to do: a second up runs no stack
    assert double.up() == 0 and double.ran("up") == []
    assert "nothing to up" in capsys.readouterr().out


def test_secrets_never_appear_on_a_command_line(double):
    assert double.up() == 0
    assert double.ran("up")
    for call in double.calls():
        assert not any(HF_TOKEN in arg for arg in call["argv"]), call
        assert not any("apiVersion: v1" in arg for arg in call["argv"])  # the kubeconfig: only its path is config
    config = [c["argv"] for c in double.calls() if c["argv"][1:3] == ["config", "set-all"] and c["stack"] == "platform-byo-eu"]
    assert any(f"modelplane:kubeconfigFile={double.kubeconfig}" in a for a in config[0])


def test_a_one_deployment_change_runs_only_its_stacks(applied):
    applied.deployment("qwen3-8b")["spec"]["replicas"] = 3
    assert applied.up() == 0
    ran = applied.ran("up")
    # its model stack, the team's quota on the cluster the new replica lands on (first), its endpoint, its route
    assert sorted(ran) == ["endpoints-ml-team", "model-ml-team.qwen3-8b", "service-ml-team.qwen3-8b",
                           "team-ml-team.gke-us-central"]
    assert ran.index("team-ml-team.gke-us-central") < ran.index("model-ml-team.qwen3-8b") < ran.index("endpoints-ml-team")


def test_a_one_deployment_change_is_checked_with_the_stacks_it_meets_not_the_whole_fleet(double, monkeypatch, capsys):
    """At fleet scale the check of every stack (a program run each) took longer than the change: `up` checks the
    stacks it runs and those they meet (`around`); the others are applied as recorded and are not run again."""
    from automation.checks import offline_preview
    from automation.checks.offline_preview import around
    from automation.planning.stacks import desired_state
    from benchmarks.plan_bench import generate
    from fleet.loader import load_paths
    from fleet.validate import validate_documents

    double.docs = generate(6, 6)
    kubeconfigs = double.work / ".modelplane" / "kubeconfigs"
    kubeconfigs.mkdir(parents=True)
    for i in range(6):
        (kubeconfigs / f"kc-{i}").write_text("apiVersion: v1\nkind: Config\n")
    assert main(["up", "-f", double.fleet()]) == 0, capsys.readouterr().err
    previewed: list[str] = []
    real = offline_preview.preview_stack

    def spy(spec, fleet, settings=None):
        previewed.append(spec.name)
        return real(spec, fleet, settings)

    monkeypatch.setattr(offline_preview, "preview_stack", spy)
    changed = next(d for d in double.docs if d["kind"] == "ModelDeployment")
    changed["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]["image"] = \
        "vllm/vllm-openai:v0.12.0"
    double.mark = len(double.calls())
    assert main(["up", "-f", double.fleet()]) == 0, capsys.readouterr().err
    ran = set(double.ran("up"))
    assert ran == {f"model-{changed['metadata']['namespace']}.{changed['metadata']['name']}"}
    fleet = validate_documents(load_paths([double.fleet()])[0]).fleet
    specs = desired_state(fleet, [p for s in double.recorded().values() for p in _replicas(s)]).specs
    assert set(previewed) == around(specs, ran) and len(previewed) == len(set(previewed)) < len(specs) / 2
    assert {s.name for s in specs.values() if s.targets and not set(s.targets) & {
        t for name in ran for t in specs[name].targets}} & set(previewed) == set()  # nothing only on other clusters


def test_a_destroyed_stack_is_checked_with_the_whole_fleet(applied, capsys):
    """What a destroyed stack gave may be what an unchanged one needs, and nothing about the unchanged one shows
    it: removing the InferenceGateway (its stack pruned) would leave every service routing through a Gateway that
    no longer exists. With a stack to destroy, `up` checks every stack, and refuses."""
    applied.docs = [d for d in applied.docs if d["kind"] != "InferenceGateway"]
    assert applied.up("--prune") == 1
    err = capsys.readouterr().err
    assert "inference-routing" in err and "nothing was applied" in err
    assert applied.ran("up") == [] and applied.ran("destroy") == []


def _replicas(stack: dict) -> list:
    from automation.record.applied import replica_from_dict

    return [replica_from_dict(p) for p in stack.get("placements") or []]


def test_removing_a_deployment_destroys_exactly_its_stack_with_prune(applied, capsys):
    applied.docs = [d for d in applied.docs if not (d["kind"] in ("ModelDeployment", "ModelService")
                                                     and d["metadata"]["name"] == "kimi-k2")]
    # without --prune, input that lacks an object never destroys its stack
    assert applied.up() == 0
    err = capsys.readouterr().err
    assert applied.ran("destroy") == [] and "kept: model-ml-team.kimi-k2 is recorded but not in the input" in err
    assert "model-ml-team.kimi-k2" in applied.recorded()
    assert applied.up("--prune") == 0, capsys.readouterr().err
    assert applied.ran("destroy") == ["service-ml-team.kimi-k2", "model-ml-team.kimi-k2"]  # dependents first
    assert "model-ml-team.kimi-k2" not in applied.recorded() and "service-ml-team.kimi-k2" not in applied.recorded()


def test_removing_a_cluster_destroys_its_workloads_first_and_only_when_confirmed(applied, capsys):
    applied.docs = [d for d in applied.docs if not (d["kind"] == "InferenceCluster" and d["metadata"]["name"] == "eks-us-west")]
    assert applied.up("--prune") == 2
    assert "--yes-destroy-clusters" in capsys.readouterr().err and applied.ran("destroy") == [] and applied.ran("up") == []
    assert applied.up("--prune", "--yes-destroy-clusters") == 0, capsys.readouterr().err
    ups, destroys = applied.ran("up"), applied.ran("destroy")
    assert destroys[-1] == "platform-eks-us-west" and "platform-eks-us-west" not in applied.recorded()
    calls = applied.calls()[applied.mark:]
    last_workload = max(i for i, c in enumerate(calls) if _verb(c["argv"]) == "up")
    first_platform_destroy = next(i for i, c in enumerate(calls) if _verb(c["argv"]) == "destroy"
                                  and c["stack"] == "platform-eks-us-west")
    assert ups and last_workload < first_platform_destroy  # replicas moved off the cluster before it went


def test_a_failing_stack_skips_only_its_dependents_and_a_rerun_converges(double, capsys):
    double.control(fail={"platform-gke-us-central": "creating node pool: GCE_STOCKOUT"})
    assert double.up() == 1
    err = capsys.readouterr().err
    assert "failed: platform-gke-us-central: error: creating node pool: GCE_STOCKOUT" in err
    recorded = set(double.recorded())
    assert "platform-gke-us-central" not in recorded
    skipped = {line.split(": ")[1] for line in err.splitlines() if line.strip().startswith("skipped:")}
    assert {"model-ml-team.qwen3-8b", "team-ml-team.gke-us-central", "endpoints-ml-team"} <= skipped
    assert {"platform-eks-us-west", "platform-byo-eu", "gateway", "model-ml-team.kimi-k2"} <= recorded  # the others
    assert not skipped & recorded
    double.control()
    assert double.up() == 0, capsys.readouterr().err
    assert set(double.ran("up")) == EVERY_STACK - recorded  # only what did not succeed
    assert set(double.recorded()) == EVERY_STACK


def test_destroy_needs_confirmation_for_clusters_and_forgets_every_stack(applied, capsys):
    applied.mark = len(applied.calls())
    assert main(["destroy", *applied.args()]) == 2
    err = capsys.readouterr().err
    assert "this would destroy 15 stack(s), clusters included" in err and "--yes" in err and applied.ran("destroy") == []
    assert main(["destroy", *applied.args("--yes", "--unprotect")]) == 0, capsys.readouterr().err
    destroys = applied.ran("destroy")
    assert set(destroys) == EVERY_STACK and destroys.index("service-ml-team.qwen3-8b") < destroys.index("gateway")
    assert applied.recorded() == {}


def test_legacy_stack_names_are_renamed_in_the_backend_before_an_update(applied, capsys):
    backend = Backend(f"file://{applied.work / '.modelplane' / 'backend'}")
    backend.rename("modelplane-workloads", "model-ml-team.qwen3-8b", "model-ml-team-qwen3-8b")
    assert main(["status", "-f", applied.fleet()]) == 0
    assert "the next `up` renames it to model-ml-team.qwen3-8b" in capsys.readouterr().out
    assert applied.up() == 0, capsys.readouterr().err
    renames = [c["argv"] for c in applied.calls()[applied.mark:] if c["argv"][1:3] == ["stack", "rename"]]
    assert renames and renames[0][3] == "model-ml-team.qwen3-8b" and "model-ml-team-qwen3-8b" in renames[0]
    assert applied.ran("up") == [] and applied.ran("destroy") == []  # renamed, not recreated nor destroyed
    assert "model-ml-team.qwen3-8b" in applied.recorded() and "model-ml-team-qwen3-8b" not in applied.recorded()


def _as_at_a_terminal() -> None:
    """In the child: SIGINT as a terminal gives it. A parent started in the background by a shell without job control
    (`nohup make test &`) ignores SIGINT, and an ignored signal stays ignored across exec: the test's Ctrl-C would
    never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_up(double, fleet: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    popen.setdefault("preexec_fn", _as_at_a_terminal)
    return subprocess.Popen([str(ROOT / ".venv" / "bin" / "modelplane") if (ROOT / ".venv" / "bin" / "modelplane").exists()
                             else sys.executable, *([] if (ROOT / ".venv" / "bin" / "modelplane").exists()
                                                    else ["-m", "automation.cli"]),
                             "up", "-f", fleet, "--kubeconfig", f"byo-eu={double.kubeconfig}"],
                            cwd=double.work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _wait_for(path: pathlib.Path, process: subprocess.Popen, seconds: float = 300) -> None:
    """Until the `up` in `process` has started the hanging stack (`path`). A readiness wait, not a speed check: a
    busy machine (make test on 2 CPUs) took over 60 s to get there. An `up` that exited first fails at once, with
    what it said."""
    deadline = time.monotonic() + seconds
    while not path.exists():
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"up exited {process.returncode} before {path.name} appeared:\n{out}\n{err}")
        assert time.monotonic() < deadline, f"{path} never appeared within {seconds:.0f} s"
        time.sleep(0.05)


def test_ctrl_c_interrupts_running_engines_and_starts_nothing_new(double):
    double.control(hang=["platform-gke-us-central"])
    process = _start_up(double, double.fleet())
    _wait_for(double.root / "double" / "hanging", process)
    process.send_signal(signal.SIGINT)  # as a terminal's Ctrl-C reaches the modelplane process
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "cancelling" in err and "cancelled: platform-gke-us-central" in err
    ups = [c["stack"] for c in double.calls() if _verb(c["argv"]) == "up"]
    assert "gateway" not in ups and not [s for s in ups if s.startswith(("model-", "service-", "cache-"))]
    assert "platform-gke-us-central" not in double.recorded()
    assert not (double.root / "double" / "hanging").exists()  # the engine itself stopped (SIGINT), not only the lock
    # the stacks that finished before the interrupt are recorded; a rerun converges
    double.control()
    assert main(["up", *double.args()]) == 0
    assert set(double.recorded()) == EVERY_STACK


@pytest.mark.parametrize("how", ["a terminal's Ctrl-C", "SIGTERM"])
def test_a_terminals_ctrl_c_and_sigterm_stop_the_engines_as_one_interrupt(double, how):
    """A terminal's Ctrl-C reaches modelplane's whole process group: the `pulumi` processes run in groups of their
    own, so the one SIGINT they get is modelplane's (the real CLI terminates at once at a second one, leaving the
    step in flight pending in the checkpoint). SIGTERM (`kill`, `timeout`, a cancelled CI job) stops a run as
    Ctrl-C does: it killed modelplane at once, and the real CLI with it, holding the stack's lock."""
    double.control(hang=["platform-gke-us-central"])
    process = _start_up(double, double.fleet(), start_new_session=True)
    _wait_for(double.root / "double" / "hanging", process)
    if how == "SIGTERM":
        process.send_signal(signal.SIGTERM)
    else:
        os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "cancelled: platform-gke-us-central" in err
    assert not (double.root / "double" / "hanging").exists()  # the engine itself stopped
    ups = [c for c in double.calls() if _verb(c["argv"]) == "up"]
    assert ups and all(c["ownGroup"] for c in ups)
    assert not list((double.work / ".modelplane" / "backend" / ".pulumi" / "locks").rglob("*.json"))


def test_once_cancelling_a_further_ctrl_c_or_sigterm_only_says_the_run_is_stopping(capsys):
    """A second Ctrl-C that came after a cancelled run had stopped (in under a second on the real engine) was raised
    while the process exited: a traceback, and the process killed by SIGINT instead of exit 130."""
    from automation.execution.session import hold_interrupts

    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        hold_interrupts()
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # the handlers run in this thread, between two of its bytecodes
        hold_interrupts(stopped=True)  # the run stopped: ignored while the process exits
        assert {signal.getsignal(number) for number in before} == {signal.SIG_IGN}
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
    assert capsys.readouterr().err.count("still waiting for running stacks to stop safely") == 2
    # a caller in the same process gets its handlers back from `main`
    assert main(["validate", "-f", str(ROOT / "examples")]) == 0
    assert {number: signal.getsignal(number) for number in before} == before


def test_a_lock_left_by_a_killed_update_of_this_machine_is_released_and_a_live_one_is_not(applied, capsys):
    """A `pulumi` killed mid-update (SIGKILL, the OOM killer) leaves its lock in a DIY backend, and every later `up`
    of the stack failed until someone ran `pulumi cancel` (the real engine showed it). A lock whose process, on this
    machine, no longer runs is released and the stack runs; a lock whose process runs is another update's, and
    stays."""
    from tests.pulumi_engine import lock_content

    stack = "model-ml-team.qwen3-8b"
    folder = applied.work / ".modelplane" / "backend" / ".pulumi" / "locks" / "organization" / "modelplane-workloads" / stack
    folder.mkdir(parents=True, exist_ok=True)
    ended = subprocess.Popen(["true"])
    ended.wait()
    stale = folder / "killed.json"
    stale.write_text(json.dumps(lock_content(ended.pid)))
    assert applied.up("--force", stack) == 0, capsys.readouterr().err
    assert applied.ran("up") == [stack, stack] and not stale.exists()  # refused, the lock released, run
    live = folder / "running.json"
    live.write_text(json.dumps(lock_content(os.getpid())))
    assert applied.up("--force", stack) == 1
    assert live.exists() and f"stack {stack} is locked by another update" in capsys.readouterr().err


def test_a_refresh_that_found_drift_makes_the_next_up_run_the_stack(applied, capsys):
    """`refresh` records what the clusters hold (an object deleted by hand leaves the checkpoint), but the record's
    fingerprint still said the stack was applied, so `up` ran nothing and the object stayed gone (the real engine
    showed it). The stack runs again, its replicas where they were; a refresh that found nothing changes nothing."""
    stack = "model-ml-team.qwen3-8b"
    placements = applied.recorded()[stack]["placements"]
    applied.control(drift=[stack])
    assert main(["refresh", *applied.args()]) == 0, capsys.readouterr().err
    applied.control()
    assert main(["refresh", *applied.args()]) == 0  # a later refresh that found nothing: still not applied
    assert applied.up() == 0, capsys.readouterr().err
    assert applied.ran("up") == [stack]
    assert applied.recorded()[stack]["placements"] == placements
    assert main(["refresh", *applied.args()]) == 0
    assert applied.up() == 0 and applied.ran("up") == []


def test_ctrl_c_starts_no_stack_queued_behind_the_running_ones(double):
    """Two platform stacks run (--parallel 2), the third waits for a free slot: after Ctrl-C it never starts, no
    `pulumi` process starts at all, and it is listed as skipped."""
    running = ["platform-byo-eu", "platform-eks-us-west"]
    double.control(hang=running)
    process = _start_up(double, double.fleet())
    for stack in running:
        _wait_for(double.root / "double" / f"hanging.{stack}", process)
    before = len(double.calls())
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert double.calls()[before:] == []  # nothing started after the interrupt, the queued stack's up least of all
    assert "platform-gke-us-central" not in {c["stack"] for c in double.calls()}
    assert all(f"cancelled: {stack}" in err for stack in running)  # each running engine got the SIGINT
    assert not list((double.root / "double").glob("hanging*"))
    assert "[platform-gke-us-central] skipped: not started: cancelled" in err
    assert "skipped: platform-gke-us-central: not started: cancelled" in err  # and in the run's summary


def test_a_second_up_on_the_same_state_is_refused_while_one_runs(double, capsys):
    double.control(hang=["platform-gke-us-central"])
    process = _start_up(double, double.fleet())
    try:
        _wait_for(double.root / "double" / "hanging", process)
        assert main(["up", *double.args()]) == 2
        err = capsys.readouterr().err
        assert "is changing the fleet in" in err and "wait for it to finish" in err
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)


def test_drift_is_reported_for_ci_with_exit_code_1(applied, capsys):
    applied.mark = len(applied.calls())
    assert main(["drift", *applied.args()]) == 0
    assert "no drift: 15 applied stack(s) match" in capsys.readouterr().out
    assert set(applied.ran("refresh")) == EVERY_STACK
    assert all("--preview-only" in c["argv"] for c in applied.calls()[applied.mark:] if _verb(c["argv"]) == "refresh")
    applied.control(drift=["platform-gke-us-central"])
    assert main(["drift", *applied.args()]) == 1
    out = capsys.readouterr().out
    assert "drift: platform-gke-us-central: update 1" in out and "1 of 15 applied stack(s) no longer match" in out
    assert applied.recorded()["platform-gke-us-central"]  # a drift check changes nothing


def test_force_reruns_an_unchanged_stack_and_refresh_reads_the_clouds_first(applied, capsys):
    assert applied.up("--force", "model-ml-team.qwen3-8b", "--refresh") == 0
    assert applied.ran("up") == ["model-ml-team.qwen3-8b"]
    up = next(c for c in applied.calls()[applied.mark:] if _verb(c["argv"]) == "up")
    assert "--refresh" in up["argv"]
    assert applied.up("--force", "model-nope.x") == 2
    assert "--force names model-nope.x, not a stack of these manifests" in capsys.readouterr().err


def test_upgrading_a_pinned_chart_or_the_project_reruns_the_stacks_it_affects(monkeypatch):
    from automation.planning.stacks import desired_state
    from components import versions
    from fleet.validate import load_fleet

    fleet = load_fleet([str(ROOT / "examples")]).fleet
    before = {name: spec.fingerprint for name, spec in desired_state(fleet).specs.items()}
    keda = versions.CHARTS["keda"]
    monkeypatch.setitem(versions.CHARTS, "keda", versions.Chart(keda.key, keda.chart, keda.repo, "2.99.0", keda.namespace,
                                                                 keda.crds))
    after = {name: spec.fingerprint for name, spec in desired_state(fleet).specs.items()}
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {name for name in before if name.startswith("platform-") or name == "gateway"}
    monkeypatch.setattr(versions, "project_version", lambda: "9.9.9")
    import automation.planning.stacks as stacks_module
    monkeypatch.setattr(stacks_module, "project_version", lambda: "9.9.9")
    again = {name: spec.fingerprint for name, spec in desired_state(fleet).specs.items()}
    assert all(again[name] != after[name] for name in again)  # a new release re-runs every stack


# ---- the portal's worker: the same orchestrator, runner and state as the CLI --------------------------------

def test_portal_writes_are_applied_and_deleted_through_the_orchestrator_on_the_shared_state(double, capsys):
    from automation.portal.worker import Worker
    from tests.manifests import cluster, deployment, gpu_class
    from tests.portal_server import ADMIN, API, ThreadServer

    state = double.work / ".modelplane"
    (state / "kubeconfigs").mkdir(parents=True)
    (state / "kubeconfigs" / "c1-kubeconfig").write_text("apiVersion: v1\nkind: Config\n")  # its existing.secretRef
    (double.root / "portal").mkdir(exist_ok=True)
    with ThreadServer(double.root / "portal", apply=True) as server:
        worker = Worker(server.store, state)
        with server.client(ADMIN) as admin:
            assert admin.put(f"{API}/inferenceclasses/l4", json=gpu_class("l4", 1, "23034Mi")).status_code == 201
            assert admin.put(f"{API}/inferenceclusters/c1", json=cluster("c1", pools=(("gpu", "l4", 4),))).status_code == 201
            path = f"{API}/namespaces/team-a/modeldeployments/qwen"
            assert admin.put(path, json=deployment("qwen", namespace="team-a")).status_code == 201
            server.settle()  # the fleet is planned after the write in the background, which queues the runs
            batch = worker.claim()
            assert {r["stack"] for r in batch} == {"platform-c1", "team-team-a.c1", "model-team-a.qwen"}
            worker.execute(batch)
            runs = {r["stack"]: r for r in admin.get("/runs").json()["items"]}
            assert runs["platform-c1"]["status"] == "succeeded" and runs["model-team-a.qwen"]["status"] == "succeeded"
            ups = [c["stack"] for c in double.calls() if _verb(c["argv"]) == "up"]
            # dependency order, through the orchestrator: the cluster, the team's namespace on it, the model
            assert ups == ["platform-c1", "team-team-a.c1", "model-team-a.qwen"]
            # one state: the CLI sees what the portal applied, in the same backend (no second cluster)
            assert set(double.recorded()) == {"platform-c1", "team-team-a.c1", "model-team-a.qwen"}
            # the conditions users' tools read now say what was applied (Pulumi waited for the workloads)
            md = admin.get(path).json()
            ready = {c["type"]: (c["status"], c["reason"]) for c in md["status"]["conditions"]}
            assert ready["ReplicasReady"] == ("True", "AllReplicasReady") and md["status"]["replicas"]["ready"] == 1
            (replica,) = admin.get(f"{API}/namespaces/team-a/modelreplicas").json()["items"]
            assert {c["type"]: c["status"] for c in replica["status"]["conditions"]} == {"ModelAccepted": "True",
                                                                                       "ModelReady": "True"}
            c1 = admin.get(f"{API}/inferenceclusters/c1").json()
            assert {c["type"]: c["status"] for c in c1["status"]["conditions"]} == {"ClusterReady": "True",
                                                                                  "BackendReady": "True"}
            assert all(pathlib.Path(c["cwd"]).parent == state / "stacks" for c in double.calls() if _verb(c["argv"]) == "up")
            # the portal shows the placements it applied: its ModelReplicas are the record's, name and cluster
            shown = {r["metadata"]["name"]: r["spec"]["clusterName"]
                     for r in admin.get(f"{API}/namespaces/team-a/modelreplicas").json()["items"]}
            applied = {p["name"]: p["cluster"] for p in double.recorded()["model-team-a.qwen"]["placements"]}
            assert shown == applied
            # a DELETE is applied too: the stack is destroyed and forgotten (it used to crash in the runner)
            assert admin.delete(path).status_code == 200
            server.settle()
            worker.execute(worker.claim())
            assert double.ran("destroy", since=0) == ["model-team-a.qwen", "team-team-a.c1"]  # dependents first
            assert set(double.recorded()) == {"platform-c1"}
            deleted = next(r for r in admin.get("/runs").json()["items"] if r["operation"] == "destroy")
            assert deleted["status"] == "succeeded"


def test_portal_runs_wait_while_the_cli_holds_the_state(double):
    from automation.portal.worker import Worker
    from tests.manifests import cluster, gpu_class
    from tests.portal_server import ADMIN, API, ThreadServer

    state = double.work / ".modelplane"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]);"
                               "from automation.execution.state import WorkdirLock; s = WorkdirLock(sys.argv[2]); s.lock();"
                               "print('locked', flush=True); time.sleep(60)", str(ROOT), str(state)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        (double.root / "portal").mkdir(exist_ok=True)
        with ThreadServer(double.root / "portal", apply=True) as server:
            worker = Worker(server.store, state)
            with server.client(ADMIN) as admin:
                admin.put(f"{API}/inferenceclasses/l4", json=gpu_class("l4", 1, "23034Mi"))
                admin.put(f"{API}/inferenceclusters/c1", json=cluster("c1", pools=(("gpu", "l4", 4),)))
                worker.execute(worker.claim())
                run = admin.get("/runs").json()["items"][0]
                assert run["status"] == "queued" and "is changing the fleet" in admin.get(f"/runs/{run['id']}").json()["log"]
                assert double.ran("up", since=0) == []
    finally:
        holder.kill()
        holder.wait()
    assert double.recorded() == {}


def test_a_portal_write_whose_secret_has_no_value_applies_no_stack_and_names_it(double):
    """The portal's worker runs the CLI's preflight: a ModelCache whose authSecret has no value fails every run of
    the batch before any stack applies, naming the Secret. It used to fail inside the cache stack's program with a
    config key for a name, after the cluster's and the team's stacks had applied."""
    from automation.portal.worker import Worker
    from tests.manifests import cache, cluster, deployment, gpu_class
    from tests.portal_server import ADMIN, API, ThreadServer

    state = double.work / ".modelplane"
    (state / "kubeconfigs").mkdir(parents=True)
    (state / "kubeconfigs" / "c1-kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    (double.root / "portal").mkdir(exist_ok=True)
    weights = cache("weights", namespace="team-a")
    weights["spec"]["huggingFace"]["authSecret"] = {"name": "hf-token"}
    with ThreadServer(double.root / "portal", apply=True) as server:
        worker = Worker(server.store, state)
        with server.client(ADMIN) as admin:
            assert admin.put(f"{API}/inferenceclasses/l4", json=gpu_class("l4", 1, "23034Mi")).status_code == 201
            assert admin.put(f"{API}/inferenceclusters/c1", json=cluster("c1", pools=(("gpu", "l4", 4),))).status_code == 201
            assert admin.put(f"{API}/namespaces/team-a/modelcaches/weights", json=weights).status_code == 201
            assert admin.put(f"{API}/namespaces/team-a/modeldeployments/qwen",
                             json=deployment("qwen", namespace="team-a", modelCacheRef={"name": "weights"})).status_code == 201
            server.settle()
            batch = worker.claim()
            assert "cache-team-a.weights" in {r["stack"] for r in batch}
            worker.execute(batch)
            runs = admin.get("/runs").json()["items"]
            assert runs and {r["status"] for r in runs} == {"failed"}
            log = admin.get(f"/runs/{runs[0]['id']}").json()["log"]
            assert "Secret team-a/hf-token key 'HF_TOKEN' has no value" in log, log
    assert [c for c in double.calls() if _verb(c["argv"]) in ("up", "preview")] == []  # no stack ran
    assert Backend(f"file://{state / 'backend'}").stacks() == []  # no stack in the backend, none applied


def test_run_visibility_follows_the_parsed_namespace_not_a_split_on_dashes():
    """Team `ml` used to read `ml-team`'s runs (and `ml-team` none of its own): names were split on '-'."""
    from automation.portal.auth import Principal
    from fleet.stack_id import StackId

    ml = Principal("ml", frozenset({"ml"}), False)
    ml_team = Principal("ml-team", frozenset({"ml-team"}), False)
    theirs = str(StackId.model("ml-team", "qwen"))
    from automation.portal.sessions import stack_namespace

    assert stack_namespace(theirs) == "ml-team" and stack_namespace(str(StackId.model("ml", "team-qwen"))) == "ml"
    assert ml_team.can_see(stack_namespace(theirs)) and not ml.can_see(stack_namespace(theirs))
    assert stack_namespace("platform-c1") is None and stack_namespace("model-ml-team-qwen") is None  # legacy: admins


def test_up_refuses_a_fleet_that_would_not_apply_and_applies_nothing(double, capsys):
    """The deployability check runs before anything: a GKE cluster with no project would fail at its provider."""
    cluster = next(d for d in double.docs if d["kind"] == "InferenceCluster" and d["metadata"]["name"] == "gke-us-central")
    del cluster["spec"]["cluster"]["gke"]["project"]
    assert double.up() == 1
    err = capsys.readouterr().err
    assert "platform-gke-us-central: -: program: " in err and "gke.project" in err and "nothing was applied" in err
    assert double.ran("up") == [] and double.recorded() == {}


def test_two_fleets_share_one_backend_without_colliding(double, capsys):
    """--fleet prefixes every backend stack name (and the platform references), so staging and production
    never both own `gateway`."""
    assert double.up("--fleet", "staging") == 0, capsys.readouterr().err
    staging = set(double.ran("up"))
    assert staging == {f"staging_{name}" for name in EVERY_STACK}
    state = double.work / ".modelplane"
    assert double.up("--fleet", "staging") == 0 and double.ran("up") == []  # its own record, by its stacks' names
    assert double.up("--fleet", "production") == 0, capsys.readouterr().err
    assert set(double.ran("up")) == {f"production_{name}" for name in EVERY_STACK}
    backend = Backend(f"file://{state / 'backend'}").stacks()
    assert {stack for _, stack in backend} == staging | {f"production_{name}" for name in EVERY_STACK}
    assert main(["up", *double.args("--fleet", "Not_A_Label")]) == 2


def test_status_shows_each_service_address_once_the_gateway_is_known(double, capsys):
    assert main(["status", "-f", double.fleet()]) == 0
    assert "service ml-team/qwen3-8b: pending (known once the gateway stack applied)" in capsys.readouterr().out
    double.control(resourceOutputs={"gateway": {GATEWAY: {"status": {"addresses": [{"value": "203.0.113.7"}]}}}})
    assert double.up() == 0
    capsys.readouterr()
    assert main(["status", "-f", double.fleet(), "-o", "json"]) == 0
    services = {s["name"]: s["address"] for s in json.loads(capsys.readouterr().out)["services"]}
    assert services["ml-team/qwen3-8b"] == "http://203.0.113.7/ml-team/qwen3-8b"


def test_status_says_how_to_read_an_address_the_applied_gateway_did_not_have_yet(double, capsys):
    """A gateway stack applied before its load balancer had an address (a cluster without a cloud load balancer, as
    `make demo`'s local fleet) records none: `status` says so and names the command that reads it, not "known once
    the gateway stack applied" about a stack that is applied."""
    double.control(resourceOutputs={"gateway": {GATEWAY: {"status": {"addresses": []}}}})  # no address yet
    assert double.up() == 0
    assert not double.recorded()["gateway"]["outputs"].get("address")
    capsys.readouterr()
    assert main(["status", "-f", double.fleet()]) == 0
    out = capsys.readouterr().out
    assert ("service ml-team/qwen3-8b: pending (the gateway stack applied before its load balancer had an address: "
            "`modelplane up --refresh --force gateway` reads it (annotate an Existing cluster that has a load balancer "
            "modelplane.ai/load-balancer: \"true\" and `up` waits for it))") in out
    from automation.cli.base import cli

    up = {o for p in cli.commands["up"].params for o in p.opts}
    assert {"--refresh", "--force"} <= up


def test_secret_outputs_never_reach_the_recorded_state(double):
    double.kubeconfig.write_text("apiVersion: v1\nkind: Config\n# SECRET-KC\n")
    assert double.up() == 0
    assert main(["plan", *double.args()[:2]]) == 0  # reads the record, and caches it
    state_text = "".join(p.read_text() for p in (double.work / ".modelplane").glob("*.json"))
    assert "platform-byo-eu" in state_text
    outputs = pulumi_double.stack_outputs(double.work / ".modelplane" / "backend", "modelplane", "platform-byo-eu")
    assert "SECRET-KC" in outputs["kubeconfig"]  # the program exported it, as a secret ...
    assert "kubeconfig" not in double.recorded()["platform-byo-eu"]["outputs"]  # ... which the record never holds
    assert "SECRET-KC" not in state_text


# ---- the first real run: what the program-running double shows ----------------------------------------------

def _slices(backend: pathlib.Path, stack: str) -> list[dict]:
    """The EndpointSlices an endpoints stack applied (its ConfigGroup's objects, as the engine received them)."""
    return [o for r in pulumi_double.resources(backend, "modelplane-workloads", stack)
            if r["type"] == "kubernetes:yaml/v2:ConfigGroup" for o in r["inputs"]["objs"] if o["kind"] == "EndpointSlice"]


def test_first_up_creates_the_backend_and_points_every_endpoint_at_the_address_its_platform_stack_output(double, capsys):
    backend = double.work / ".modelplane" / "backend"
    assert not backend.exists()
    assert double.up() == 0, capsys.readouterr().err
    assert (backend / ".pulumi" / "stacks" / "modelplane").is_dir()  # the default backend was created
    addresses = {c: pulumi_double.stack_outputs(backend, "modelplane", f"platform-{c}").get("gatewayAddress")
                 for c in ("byo-eu", "eks-us-west", "gke-us-central")}
    assert addresses["gke-us-central"] and addresses["eks-us-west"]  # cloud load balancers gave their Gateways one
    assert addresses["byo-eu"] is None  # an Existing cluster with no MetalLB: its Gateway has no address
    slices = _slices(backend, "endpoints-ml-team")
    assert slices
    for s in slices:
        cluster = s["metadata"]["annotations"]["modelplane.ai/gateway-of"]
        if addresses[cluster]:
            assert s["endpoints"][0]["addresses"] == [addresses[cluster]] and s["addressType"] == "IPv4"
        else:  # no address: the slice routes nowhere rather than to a placeholder
            assert s["endpoints"] == []
        # the operator's Programs use the platform stack's outputs as is: they hold the same slice
        outputs = pulumi_double.stack_outputs(backend, "modelplane", f"platform-{cluster}")
        assert outputs["gatewayEndpoints"] == s["endpoints"] and outputs["gatewayAddressType"] == s["addressType"]
    assert "pending.modelplane.invalid" not in json.dumps(slices)
    # the record holds the addresses: nothing is left to do, and render shows what up recorded
    assert double.up() == 0 and double.ran("up") == []
    capsys.readouterr()
    assert main(["render", "-f", double.fleet(), "--out", "-"]) == 0
    rendered = capsys.readouterr().out
    assert addresses["gke-us-central"] in rendered and "gke-us-central.gateway.pending" not in rendered


def set_gateway_address(backend: pathlib.Path, cluster: str, address: str) -> None:
    """A platform stack's gatewayAddress output changed, as an update after a re-created load balancer leaves it."""
    store = Backend(f"file://{backend}")
    content = store.load("modelplane", f"platform-{cluster}")
    root = next(r for r in content["checkpoint"]["latest"]["resources"] if r["type"] == "pulumi:pulumi:Stack")
    root["outputs"]["gatewayAddress"] = address
    content["checkpoint"]["latest"]["manifest"] = {"time": "2099-01-01T00:00:00.123Z"}  # `stack ls`'s lastUpdate
    content["history"].append({**content["history"][-1], "startTime": "2099-01-01T00:00:00.000Z",
                               "endTime": "2099-01-01T00:00:00.000Z"})
    store.save("modelplane", f"platform-{cluster}", content)


def test_a_changed_gateway_address_updates_exactly_the_endpoints_stack(applied, capsys):
    set_gateway_address(applied.work / ".modelplane" / "backend", "gke-us-central", "192.0.2.99")
    assert applied.up() == 0, capsys.readouterr().err
    assert applied.ran("up") == ["endpoints-ml-team"]


def test_removing_a_provisioned_cluster_runs_to_the_end_through_its_protection(applied, capsys):
    """The protection-lifting update runs the cluster's program from what its stack recorded (the fleet no longer
    describes it), then the destroy deletes the protected cluster and network; GKE's own deletion protection too."""
    backend = applied.work / ".modelplane" / "backend"
    cluster = next(r for r in pulumi_double.resources(backend, "modelplane", "platform-gke-us-central")
                   if r["type"] == "gcp:container/cluster:Cluster")
    assert cluster["protect"] and cluster["inputs"]["deletionProtection"] is True
    applied.docs = [d for d in applied.docs if not (d["kind"] == "InferenceCluster" and d["metadata"]["name"] == "gke-us-central")]
    assert applied.up("--prune", "--yes-destroy-clusters") == 0, capsys.readouterr().err
    assert "platform-gke-us-central" not in applied.recorded()
    # destroyed, and gone from the backend with its resources
    assert not (backend / ".pulumi" / "stacks" / "modelplane" / "platform-gke-us-central.json").exists()
    calls = [c for c in applied.calls()[applied.mark:] if c["stack"] == "platform-gke-us-central"]
    lifted = [c for c in calls if _verb(c["argv"]) == "up"]
    assert len(lifted) == 1  # the update that lifted the protection, before the destroy
    # ... targeted at the cluster alone (its cloud's own deletion protection), after every protect flag was cleared
    # in the state: none of the cluster's Kubernetes objects runs again, whether its API server answers or not
    argv = lifted[0]["argv"]
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--target"] == [cluster["urn"]]
    verbs = [" ".join(args[:2]) if args[0] in ("state", "stack") else _verb(args)
             for args in ([a for a in c["argv"] if a != "--non-interactive"] for c in calls)]
    assert verbs.index("state unprotect") < verbs.index("up") < verbs.index("destroy")


@pytest.mark.parametrize("removal", ["destroy", "prune"])
def test_destroying_an_existing_cluster_whose_api_server_is_gone_runs_none_of_its_programs(applied, capsys, removal):
    """An Existing cluster has nothing of ours protected: its platform stack is destroyed without running its program
    first (which would apply its serving stack to an API server that is gone), whether it is still in the fleet
    (`destroy --unprotect`) or was removed from it (`up --prune`)."""
    applied.kubeconfig.write_text(yaml.safe_dump({  # nothing listens there any more
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone"}}],
        "users": [{"name": "gone", "user": {"token": "expired"}}]}))
    if removal == "destroy":
        command = ["destroy", *applied.args("--yes", "--unprotect")]
    else:
        applied.docs = [d for d in applied.docs
                        if not (d["kind"] == "InferenceCluster" and d["metadata"]["name"] == "byo-eu")]
        command = ["up", "-f", applied.fleet(), "--prune", "--yes-destroy-clusters"]
    assert main(command) == 0, capsys.readouterr().err
    calls = [_verb(c["argv"]) for c in applied.calls()[applied.mark:] if c["stack"] == "platform-byo-eu"]
    assert "destroy" in calls and not {"up", "preview"} & set(calls[:calls.index("destroy")]), calls
    assert "platform-byo-eu" not in applied.recorded()

def test_a_program_that_fails_half_way_keeps_what_it_created_and_a_rerun_converges(double, capsys):
    double.control(failOn={"platform-eks-us-west": {"resource": "aws:eks/nodeGroup:NodeGroup",
                                                    "error": "creating node group: InsufficientInstanceCapacity"}})
    assert double.up() == 1
    assert "InsufficientInstanceCapacity" in capsys.readouterr().err
    backend = double.work / ".modelplane" / "backend"
    created = pulumi_double.resources(backend, "modelplane", "platform-eks-us-west")
    assert any(r["type"] == "aws:ec2/vpc:Vpc" for r in created)  # what came before the failure is in the checkpoint
    assert "platform-eks-us-west" not in double.recorded()
    double.control()
    assert double.up() == 0, capsys.readouterr().err
    assert set(double.recorded()) == EVERY_STACK


def test_stack_config_reaches_the_platform_programs_as_pulumi_users_give_it(double, capsys, tmp_path):
    """A GKE cluster named without gke.project (the reference's own manifests) takes gcp:project from --config or a
    --config-file, in the offline preview and in up, as `pulumi config set` would give it."""
    cluster = next(d for d in double.docs if d["kind"] == "InferenceCluster" and d["metadata"]["name"] == "gke-us-central")
    del cluster["spec"]["cluster"]["gke"]["project"]
    assert main(["preview", "--offline", "-f", double.fleet()]) == 1
    assert "gcp:project" in capsys.readouterr().err
    assert main(["preview", "--offline", "-f", double.fleet(), "--config", "gcp:project=ml-prod-4821"]) == 0
    settings = tmp_path / "Pulumi.prod.yaml"
    settings.write_text("config:\n  gcp:project: ml-prod-4821\n")
    assert double.up("--config-file", str(settings)) == 0, capsys.readouterr().err
    gke = next(r for r in pulumi_double.resources(double.work / ".modelplane" / "backend", "modelplane",
                                                  "platform-gke-us-central") if r["type"] == "pulumi:providers:gcp")
    assert gke["inputs"]["project"] == "ml-prod-4821"
    for bad, fragment in ((["--config", "project"], "expected KEY=VALUE"),
                          (["--config", "project=x"], "not a namespaced key")):
        assert double.up(*bad) == 2 and fragment in capsys.readouterr().err
    settings.write_text("config:\n  gcp:project:\n    secure: AAABAE\n")
    assert double.up("--config-file", str(settings)) == 2 and "encrypted" in capsys.readouterr().err


def _eks_cluster_with_load_balancers(double, tmp_path):
    """eks-us-west's kubeconfig output points at a fake API server whose Gateway and Traefik-style Service hold
    cloud load balancers (the gateway controller and the cloud's service controller are played by the fake)."""
    from tests.fake_kube import FakeKube

    folder = tmp_path / "eks-api"
    folder.mkdir()
    kube = FakeKube(folder)
    kube.cluster.add_gateway("modelplane-system", "modelplane")
    kube.cluster.add_load_balancer("traefik-system", "mp-traefik")
    double.control(resourceOutputs={"platform-eks-us-west": {
        "eks:index:Cluster": {"kubeconfigJson": kube.kubeconfig.read_text()}}})
    double.docs = [d for d in double.docs if not (d["kind"] == "InferenceCluster" and d["metadata"]["name"] == "eks-us-west")]
    return kube


def test_destroying_a_provisioned_cluster_first_has_the_cloud_delete_its_load_balancers(double, tmp_path, capsys):
    """Nothing in the stack's state holds the load balancers its controllers made: left to the destroy, they would
    outlive the cluster and hold its subnets and VPC. The Gateway goes first (its controller would make its
    Service again), then the LoadBalancer Services, and the destroy waits until the cloud has deleted them."""
    docs = copy.deepcopy(double.docs)
    kube = _eks_cluster_with_load_balancers(double, tmp_path)
    try:
        assert main(["up", "-f", double.fleet(docs), "--kubeconfig", f"byo-eu={double.kubeconfig}"]) == 0, \
            capsys.readouterr().err
        assert double.up("--prune", "--yes-destroy-clusters") == 0, capsys.readouterr().err
        assert "platform-eks-us-west" in double.ran("destroy")
        assert sorted(kube.cluster.deleted_load_balancers) == [
            "envoy-gateway-system/envoy-modelplane-system-modelplane", "traefik-system/mp-traefik"]
        assert kube.cluster.recreated == []  # the Gateway went before its Service
        assert not [k for k in kube.cluster.objects if k[1] in ("Service", "Gateway")]
    finally:
        kube.close()


def test_a_load_balancer_the_cloud_does_not_delete_stops_the_destroy_before_anything_is_destroyed(
        double, tmp_path, capsys, monkeypatch):
    from automation.execution import pulumi_runner
    monkeypatch.setattr(pulumi_runner, "LOAD_BALANCER_WAIT", 0.3)
    docs = copy.deepcopy(double.docs)
    kube = _eks_cluster_with_load_balancers(double, tmp_path)
    kube.cluster.cloud_stuck = True
    try:
        assert main(["up", "-f", double.fleet(docs), "--kubeconfig", f"byo-eu={double.kubeconfig}"]) == 0
        capsys.readouterr()
        assert double.up("--prune", "--yes-destroy-clusters") == 1
        err = capsys.readouterr().err
        assert "has not deleted the load balancers of envoy-gateway-system/envoy-modelplane-system-modelplane" in err
        assert "platform-eks-us-west" not in double.ran("destroy") and "platform-eks-us-west" in double.recorded()
        assert pulumi_double.resources(double.work / ".modelplane" / "backend", "modelplane",
                                       "platform-eks-us-west")  # nothing was destroyed
        assert "fake-cluster-token" not in err  # the kubeconfig's credential is never shown
    finally:
        kube.close()


def test_a_network_held_by_a_leftover_load_balancer_says_what_to_delete(applied, capsys):
    applied.docs = [d for d in applied.docs if not (d["kind"] == "InferenceCluster" and d["metadata"]["name"] == "eks-us-west")]
    applied.control(fail={"platform-eks-us-west": "deleting ec2 Subnet: DependencyViolation: The subnet has dependencies "
                                                 "and cannot be deleted"})
    assert applied.up("--prune", "--yes-destroy-clusters") == 1
    err = capsys.readouterr().err
    assert "DependencyViolation" in err and "a load balancer or network interface the cluster's Services made" in err


def test_a_destroy_that_keeps_its_protected_cluster_leaves_its_load_balancers_serving(double, tmp_path, capsys):
    """A runner that keeps protection on (the portal's worker, any caller without unprotect) fails to destroy a
    protected cluster: it must not first take its gateway away."""
    from automation.execution.pulumi_runner import PulumiRunner
    from automation.planning.stacks import StackSpec
    from fleet.stack_id import StackId
    from fleet.validate import load_fleet

    docs = copy.deepcopy(double.docs)
    kube = _eks_cluster_with_load_balancers(double, tmp_path)
    try:
        fleet = double.fleet(docs)
        assert main(["up", "-f", fleet, "--kubeconfig", f"byo-eu={double.kubeconfig}"]) == 0
        runner = PulumiRunner(double.work / ".modelplane", load_fleet([fleet]).fleet, unprotect=False)
        result = runner.run("destroy", StackSpec.for_deletion(StackId.platform("eks-us-west")), lambda event: None)
        assert not result.ok and "holds protected resources" in (result.error or "")
        assert kube.cluster.deleted_load_balancers == []
        assert ("gateway.networking.k8s.io/v1", "Gateway", "modelplane-system", "modelplane") in kube.cluster.objects
    finally:
        kube.close()


def test_drift_with_nothing_applied_says_so(double, capsys):
    double.control()
    assert main(["drift", *double.args()]) == 0
    out = capsys.readouterr().out
    assert "nothing is applied yet: drift compares the stacks `modelplane up` applied, and the record has none" in out
    assert "preview-refresh" not in out


def test_status_watch_follows_a_rollout_until_every_stack_is_up_to_date(double, capsys):
    double.control()
    process = _start_up(double, double.fleet())
    try:
        assert main(["status", "--watch", "--interval", "0.2", *double.args()[:2]]) == 0
    finally:
        process.communicate(timeout=300)
    out = capsys.readouterr().out
    changed = [line for line in out.splitlines() if re.match(r"\d\d:\d\d:\d\d  ", line)]
    landed = {line.split()[1].rstrip(":") for line in changed if line.endswith("up to date")}
    # a stack the up applied before the watch's first read is in its table, up to date (under load, the platform
    # stacks can land first); every other stack's change is printed as it lands, and the watch ends when nothing
    # is pending
    table = {line.split()[0] for line in out.splitlines() if line.split()[:1] and line.split()[0] in EVERY_STACK
             and line.split()[1:4] == ["up", "to", "date"]}
    assert landed and landed | table == EVERY_STACK and not landed & table
    assert out.rstrip().endswith("every stack is up to date") and process.returncode == 0


def _cluster_doc(docs: list[dict], name: str) -> dict:
    return next(d for d in docs if d["kind"] == "InferenceCluster" and d["metadata"]["name"] == name)


def test_a_changed_serving_stack_is_refused_against_the_record_and_recreating_the_cluster_changes_it(applied, capsys):
    """Modelplane v0.4/v0.5: InferenceCluster spec.stack carries the CEL transition rule `self == oldSelf`, "old"
    being here what the cluster's platform stack last applied. Recreating it is the way to another stack."""
    assert applied.recorded()["platform-eks-us-west"]["outputs"]["clusterArgs"]["args"]["stack"] == "Standard"
    _cluster_doc(applied.docs, "eks-us-west")["spec"]["stack"] = "Dynamo"
    assert applied.up() == 1
    err = capsys.readouterr().err
    assert re.search(r"fleet\.yaml:\d+: InferenceCluster/eks-us-west: spec\.stack: spec\.stack is immutable; recreate "
                     r"the cluster to change its serving stack\. \(applied as Standard, now Dynamo", err), err
    assert "nothing was applied" in err and applied.ran("up") == [] and applied.ran("destroy") == []
    # the escape hatch: remove the cluster (its platform stack is destroyed), then add it back with the new stack
    recreated = copy.deepcopy(_cluster_doc(applied.docs, "eks-us-west"))
    applied.docs = [d for d in applied.docs if d is not _cluster_doc(applied.docs, "eks-us-west")]
    assert applied.up("--prune", "--yes-destroy-clusters") == 0, capsys.readouterr().err
    assert "platform-eks-us-west" not in applied.recorded()
    applied.docs.append(recreated)
    assert applied.up() == 0, capsys.readouterr().err
    assert applied.recorded()["platform-eks-us-west"]["outputs"]["clusterArgs"]["args"]["stack"] == "Dynamo"
    capsys.readouterr()
    assert applied.up() == 0 and applied.ran("up") == []  # Dynamo is now what the record holds: nothing refused


def test_the_portal_worker_refuses_a_changed_serving_stack_as_up_does(double, capsys):
    from automation.portal.worker import Worker
    from tests.manifests import cluster, gpu_class
    from tests.portal_server import ADMIN, API, ThreadServer

    state = double.work / ".modelplane"
    (state / "kubeconfigs").mkdir(parents=True)
    (state / "kubeconfigs" / "c1-kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    (double.root / "portal").mkdir(exist_ok=True)
    with ThreadServer(double.root / "portal", apply=True) as server:
        worker = Worker(server.store, state)
        with server.client(ADMIN) as admin:
            assert admin.put(f"{API}/inferenceclasses/l4", json=gpu_class("l4", 1, "23034Mi")).status_code == 201
            path = f"{API}/inferenceclusters/c1"
            assert admin.put(path, json=cluster("c1", pools=(("gpu", "l4", 4),))).status_code == 201
            server.settle()
            worker.execute(worker.claim())
            assert double.recorded()["platform-c1"]["outputs"]["clusterArgs"]["args"]["stack"] == "Standard"
            changed = cluster("c1", pools=(("gpu", "l4", 4),))
            changed["spec"]["stack"] = "Dynamo"
            changed["metadata"]["resourceVersion"] = admin.get(path).json()["metadata"]["resourceVersion"]
            assert admin.put(path, json=changed).status_code == 200
            server.settle()
            mark = len(double.calls())
            worker.execute(worker.claim())
            run = next(r for r in admin.get("/runs").json()["items"] if r["stack"] == "platform-c1")
            assert run["status"] == "failed" and "spec.stack is immutable" in run["log"], run
            assert double.ran("up", since=mark) == []  # the platform stack did not run
            assert double.recorded()["platform-c1"]["outputs"]["clusterArgs"]["args"]["stack"] == "Standard"


def test_a_destroy_that_fails_after_the_drain_has_the_next_up_run_that_stack_with_a_refresh(double, tmp_path,
                                                                                          capsys):
    """The drain deletes the cluster's Gateways; then the destroy fails (here: the cloud refuses it). The stack's
    state still holds the Gateways and its fingerprint is unchanged: before, the next `up` skipped the stack and
    the Gateways stayed deleted. Now it runs that stack with a refresh, once (a real engine then finds the Gateways
    gone and creates them again: not shown by the double, whose providers are mocks)."""
    docs = copy.deepcopy(double.docs)
    kube = _eks_cluster_with_load_balancers(double, tmp_path)
    try:
        assert main(["up", "-f", double.fleet(docs), "--kubeconfig", f"byo-eu={double.kubeconfig}"]) == 0, \
            capsys.readouterr().err
        control = json.loads((double.root / "double" / "control.json").read_text())
        double.control(**control, fail={"platform-eks-us-west": "deleting EKS Cluster: AccessDenied"})
        assert double.up("--prune", "--yes-destroy-clusters") == 1
        assert "AccessDenied" in capsys.readouterr().err
        assert ("gateway.networking.k8s.io/v1", "Gateway", "modelplane-system", "modelplane") not in kube.cluster.objects
        assert "platform-eks-us-west" in double.recorded()  # the destroy failed: the stack and its record stay
        double.control(**control)
        since = len(double.calls())
        assert main(["up", "-f", double.fleet(docs), "--kubeconfig", f"byo-eu={double.kubeconfig}"]) == 0, \
            capsys.readouterr().err
        ups = [c["argv"] for c in double.calls()[since:] if c["stack"] == "platform-eks-us-west"
               and _verb(c["argv"]) == "up"]
        assert len(ups) == 1 and "--refresh" in ups[0]
        since = len(double.calls())
        assert main(["up", "-f", double.fleet(docs), "--kubeconfig", f"byo-eu={double.kubeconfig}"]) == 0
        assert "platform-eks-us-west" not in double.ran("up", since)  # once: the mark is gone after it ran
    finally:
        kube.close()
