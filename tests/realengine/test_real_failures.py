"""Failures on the real engine, on the local fleet (local-fleet/: local-a with L4 nodes, local-b with an H100 node):
an object a cluster refuses, an `up` interrupted mid-update (Ctrl-C, SIGTERM, SIGKILL), an object deleted by hand.
Each is judged by what the API servers hold and what the backend's checkpoints say, never by modelplane's log
lines. One fleet per module: the tests run in order, each starting from what the one before applied."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from automation.local import toolchain
from tests.realengine.conftest import FLEET, MODELPLANE, Fleet, wait_for
from tests.realengine.test_real_up import running_pods

QWEN, LLAMA = "model-ml-team.qwen3-8b", "model-ml-team.llama-70b"
OTHERS = {"platform-local-a", "platform-local-b", "gateway", "team-ml-team.local-a", "team-ml-team.local-b",
          "endpoints-ml-team", "service-ml-team.qwen3-8b"}

# a cluster policy, as Kyverno or Gatekeeper would set, but the API server's own (CEL, no webhook): no Deployment
# of llama-70b is created or changed on local-b
POLICY = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: freeze-llama}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}
  validations:
    - expression: "!object.metadata.name.startsWith('llama-70b')"
      message: llama-70b is frozen on this cluster
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: freeze-llama}
spec: {policyName: freeze-llama, validationActions: [Deny]}
"""


def kubectl(fleet: Fleet, cluster: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """The toolchain's kubectl against one local cluster, as a platform engineer would run it."""
    return subprocess.run([str(toolchain.find().binary("kubectl")), "--kubeconfig",
                           str(fleet.state / "local" / cluster / "kubeconfig"), *args], input=input,
                          capture_output=True, text=True, timeout=60)


def engine(fleet: Fleet, cluster: str, deployment: str) -> dict | None:
    """A model's engine Deployment on a cluster (the one whose pods claim devices), or None."""
    found = [d for d in fleet.api(cluster).list("apps/v1", "Deployment", "ml-team")
             if d["metadata"]["name"].startswith(f"{deployment}-") and "-vllm-" in d["metadata"]["name"]]
    return found[0] if found else None


def engine_args(fleet: Fleet, cluster: str, deployment: str) -> list[str]:
    found = engine(fleet, cluster, deployment)
    assert found is not None, f"{deployment}'s engine Deployment is not on {cluster}"
    return found["spec"]["template"]["spec"]["containers"][0]["args"]


def edited(tmp_path: Path, qwen_len: int, llama_extra: bool) -> str:
    """local-fleet/ copied, with qwen3-8b's --max-model-len and, or not, an extra llama-70b argument."""
    import shutil

    fleet = tmp_path / "fleet"
    shutil.copytree(FLEET, fleet, dirs_exist_ok=True)
    models = fleet / "models.yaml"
    text = models.read_text().replace('"--max-model-len=16384"', f'"--max-model-len={qwen_len}"')
    if llama_extra:
        text = text.replace('"--tensor-parallel-size=2"]', '"--tensor-parallel-size=2", "--max-num-seqs=64"]')
    models.write_text(text)
    return str(fleet)


def checkpoint_file(fleet: Fleet, stack: str) -> Path:
    return fleet.state / "backend" / ".pulumi" / "stacks" / "modelplane-workloads" / f"{stack}.json"


def pending(fleet: Fleet, stack: str) -> list[dict]:
    """The operations the backend's checkpoint of a stack holds as in flight (read from its file: it is read while
    an update writes it)."""
    try:
        latest = json.loads(checkpoint_file(fleet, stack).read_text())["checkpoint"]["latest"]
    except (OSError, ValueError, KeyError):
        return []
    return latest.get("pending_operations") or []


def locks(fleet: Fleet, stack: str) -> list[Path]:
    """The DIY backend's lock files of a stack: one per update holding it."""
    folder = fleet.state / "backend" / ".pulumi" / "locks" / "organization" / "modelplane-workloads" / stack
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def last_update(fleet: Fleet, stack: str) -> dict:
    done = fleet.pulumi("stack", "history", "--json", "--page-size", "1", "--stack",
                        f"organization/modelplane-workloads/{stack}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)[0]


def holds(fleet: Fleet, stack: str, deployment_id: str) -> bool:
    """Does the stack's checkpoint (`pulumi stack export`) hold this Deployment?"""
    return any(r["type"] == "kubernetes:apps/v1:Deployment" and r.get("id") == deployment_id
               for r in fleet.checkpoint(stack)["deployment"].get("resources") or [])


def converged(fleet: Fleet, arg: str) -> None:
    """qwen3-8b's stack holds its engine Deployment as applied with `arg` (no error of an earlier try left on it),
    and an engine pod with `arg` runs on local-a."""
    [deployment] = [r for r in fleet.checkpoint(QWEN)["deployment"]["resources"]
                    if r["type"] == "kubernetes:apps/v1:Deployment" and "-vllm-" in r["id"]]
    assert arg in deployment["outputs"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not deployment.get("initErrors"), deployment.get("initErrors")
    wait_for(f"an engine pod with {arg} running", lambda: [
        p for p in running_pods(fleet.api("local-a"), "ml-team", "qwen3-8b")
        if arg in p["spec"]["containers"][0]["args"]])


def session_processes(session: int) -> list[int]:
    """Every process still running in a session (a killed `up`'s `pulumi` processes and their plugins)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[3]) == session and fields[0] not in ("Z", "X"):
            out.append(int(stat.parent.name))
    return out


def command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def up_interrupted(fleet: Fleet, path: str, signals: list[signal.Signals], group: bool) -> tuple[int, str]:
    """`modelplane up -f path`, sent `signals` (0.2 s apart) once qwen3-8b's engine Deployment is being updated (the
    backend's checkpoint holds that step in flight: run it on a `full` cluster); to its whole process group, as a terminal's Ctrl-C, or to
    modelplane alone, as `kill` or a CI runner. Its exit code and output; nothing it started is left running."""
    out = fleet.state.parent / "interrupted.log"
    with open(out, "w") as log:
        # SIGINT as a terminal gives it, even under a parent that ignores it (`nohup make test &`: an ignored
        # signal stays ignored across exec)
        process = subprocess.Popen([*MODELPLANE, "up", "-f", path, "--state", str(fleet.state)], cwd=fleet.state.parent,
                                   env=fleet.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while not any(op["type"] == "updating" and "-vllm-" in op["resource"]["urn"] for op in pending(fleet, QWEN)):
            assert process.poll() is None, f"up exited {process.returncode} before the update:\n{out.read_text()}"
            assert time.monotonic() < deadline, "qwen3-8b's engine Deployment never updated"
            time.sleep(0.05)
        for number, sent in enumerate(signals):
            if number:
                time.sleep(0.2)
            if group:
                os.killpg(process.pid, sent)
            else:
                process.send_signal(sent)
        return process.wait(timeout=300), out.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        # what a killed `up` leaves is this test's to end: its `pulumi` processes get a minute to end by themselves
        # (as they would: at their next write to the closed pipe), then they and their provider plugins, which
        # outlive them, are killed
        deadline = time.monotonic() + 60
        while True:
            left = session_processes(process.pid)
            if not left:
                break
            if time.monotonic() > deadline or not [pid for pid in left if command_name(pid) == "pulumi"]:
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.5)


@contextmanager
def full(fleet: Fleet, cluster: str):
    """The cluster's GPU nodes cordoned, as on a full cluster: an engine Deployment's update stays in flight, its new
    pod waiting for a GPU, until it is interrupted. Uncordoned after."""
    nodes = [n["metadata"]["name"] for n in fleet.api(cluster).list("v1", "Node", None)
             if n["metadata"]["name"].startswith("l4-")]
    assert nodes
    done = kubectl(fleet, cluster, "cordon", *nodes)
    assert done.returncode == 0, done.stderr
    try:
        yield
    finally:
        done = kubectl(fleet, cluster, "uncordon", *nodes)
        assert done.returncode == 0, done.stderr


def test_the_first_up_applies_the_fleet(local_fleet):
    local_fleet.modelplane("up", "-f", str(FLEET))
    assert "--max-model-len=16384" in engine_args(local_fleet, "local-a", "qwen3-8b")
    assert "--max-num-seqs=64" not in engine_args(local_fleet, "local-b", "llama-70b")


def test_an_object_a_cluster_policy_refuses_fails_its_stack_alone_and_the_run_converges_once_lifted(
        local_fleet, tmp_path):
    policy = kubectl(local_fleet, "local-b", "apply", "-f", "-", input=POLICY)
    assert policy.returncode == 0, policy.stderr

    def probe() -> subprocess.CompletedProcess:  # a Deployment the policy covers, never stored (server dry run)
        return kubectl(local_fleet, "local-b", "create", "deployment", "llama-70b-probe", "--image=x", "-n", "ml-team",
                       "--dry-run=server")

    try:
        wait_for("the policy in force on local-b", lambda: "freeze-llama" in probe().stderr, seconds=60)
        fleet = edited(tmp_path, 8192, llama_extra=True)  # both models change: one on each cluster
        before = {stack: local_fleet.history(stack) for stack in (QWEN, LLAMA, *OTHERS)}
        done = local_fleet.modelplane("up", "-f", fleet, check=False)
    finally:  # lifted whatever happens: the tests after this one run on what it leaves
        lifted = kubectl(local_fleet, "local-b", "delete", "-f", "-", input=POLICY)
    assert done.returncode == 1, done.stderr[-3000:]
    # the exit message names the stack and says why, in the API server's words
    failed = [line for line in done.stderr.splitlines() if LLAMA in line and "freeze-llama" in line]
    assert failed, done.stderr[-3000:]
    # the other model's stack, on the other cluster, was not held back: its change is on local-a's API server
    assert "--max-model-len=8192" in engine_args(local_fleet, "local-a", "qwen3-8b")
    assert local_fleet.history(QWEN) == before[QWEN] + 1 and last_update(local_fleet, QWEN)["result"] == "succeeded"
    # the refused stack: nothing of the change on local-b, its update recorded failed, nothing left in flight or
    # locked that would stop the next run, and nothing else ran
    assert "--max-num-seqs=64" not in engine_args(local_fleet, "local-b", "llama-70b")
    assert local_fleet.history(LLAMA) == before[LLAMA] + 1 and last_update(local_fleet, LLAMA)["result"] == "failed"
    assert not local_fleet.checkpoint(LLAMA)["deployment"].get("pending_operations") and not locks(local_fleet, LLAMA)
    assert {stack: local_fleet.history(stack) for stack in OTHERS} == {stack: before[stack] for stack in OTHERS}
    # the policy lifted, the next `up` runs exactly the stack that failed, and the change is applied
    assert lifted.returncode == 0, lifted.stderr
    wait_for("the policy lifted on local-b", lambda: probe().returncode == 0, seconds=60)
    local_fleet.modelplane("up", "-f", fleet)
    assert "--max-num-seqs=64" in engine_args(local_fleet, "local-b", "llama-70b")
    assert local_fleet.history(QWEN) == before[QWEN] + 1
    assert last_update(local_fleet, LLAMA)["result"] == "succeeded"


@pytest.mark.parametrize("how", ["ctrl-c twice at a terminal", "SIGTERM"])
def test_an_up_interrupted_mid_update_stops_cleanly_and_the_next_up_converges(local_fleet, tmp_path, how):
    # a terminal's Ctrl-C reaches modelplane's whole process group, a second one too; `kill`, `timeout`, a cancelled
    # CI job send SIGTERM to modelplane alone
    length = 4096 if how == "SIGTERM" else 2048
    fleet = edited(tmp_path, length, llama_extra=True)
    before = local_fleet.history(QWEN)
    with full(local_fleet, "local-a"):
        if how == "SIGTERM":
            code, output = up_interrupted(local_fleet, fleet, [signal.SIGTERM], group=False)
        else:
            code, output = up_interrupted(local_fleet, fleet, [signal.SIGINT, signal.SIGINT], group=True)
    assert code == 130, output[-4000:]
    # the engine stopped at a safe point: the step in flight finished (here, failed) and was written, the update is
    # recorded failed, and the stack's lock released
    assert not pending(local_fleet, QWEN) and not local_fleet.checkpoint(QWEN)["deployment"].get("pending_operations")
    assert not locks(local_fleet, QWEN)
    assert local_fleet.history(QWEN) == before + 1 and last_update(local_fleet, QWEN)["result"] == "failed"
    # room again, the next `up` applies the change, no `pulumi cancel` needed
    local_fleet.modelplane("up", "-f", fleet)
    assert f"--max-model-len={length}" in engine_args(local_fleet, "local-a", "qwen3-8b")
    assert last_update(local_fleet, QWEN)["result"] == "succeeded"
    converged(local_fleet, f"--max-model-len={length}")


def test_an_up_killed_mid_update_leaves_a_lock_the_next_up_releases(local_fleet, tmp_path):
    fleet = edited(tmp_path, 3072, llama_extra=True)
    with full(local_fleet, "local-a"):
        code, output = up_interrupted(local_fleet, fleet, [signal.SIGKILL], group=False)
    assert code == -signal.SIGKILL, output[-4000:]
    # killed, modelplane asked nothing to stop: its `pulumi` died at its next write to the closed pipe, holding the
    # stack's lock, with the step in flight pending (the test has ended every process the `up` started)
    left = locks(local_fleet, QWEN)
    assert left and pending(local_fleet, QWEN)
    # the next `up` finds the lock's process gone, releases it, and converges
    local_fleet.modelplane("up", "-f", fleet)
    assert "--max-model-len=3072" in engine_args(local_fleet, "local-a", "qwen3-8b")
    assert not locks(local_fleet, QWEN) and not local_fleet.checkpoint(QWEN)["deployment"].get("pending_operations")
    assert last_update(local_fleet, QWEN)["result"] == "succeeded"
    converged(local_fleet, "--max-model-len=3072")


def test_a_deployment_deleted_by_hand_is_drift_refresh_records_it_gone_and_up_recreates_it(local_fleet, tmp_path):
    fleet = edited(tmp_path, 3072, llama_extra=True)  # what the test before applied
    name = engine(local_fleet, "local-a", "qwen3-8b")["metadata"]["name"]
    ident = f"ml-team/{name}"
    assert holds(local_fleet, QWEN, ident)
    gone = kubectl(local_fleet, "local-a", "delete", "deployment", "-n", "ml-team", name, "--wait=true")
    assert gone.returncode == 0, gone.stderr
    assert engine(local_fleet, "local-a", "qwen3-8b") is None
    # drift reports it, with exit 1, and changes nothing
    drift = local_fleet.modelplane("drift", "-f", fleet, "-o", "json", check=False)
    assert drift.returncode == 1, drift.stderr[-3000:]
    events = [json.loads(line) for line in drift.stdout.splitlines() if line.startswith("{")]
    found = {e["stack"]: e.get("changes") or {} for e in events if e.get("type") == "succeeded"}
    assert found[QWEN].get("delete") == 1, found
    assert set(found[LLAMA]) == {"same"}, found  # the other model matches its cluster
    assert holds(local_fleet, QWEN, ident) and engine(local_fleet, "local-a", "qwen3-8b") is None
    # refresh records it gone: the resource leaves the stack's checkpoint
    local_fleet.modelplane("refresh", "-f", fleet)
    assert not holds(local_fleet, QWEN, ident)
    # the next `up` puts it back on the API server, and in the checkpoint
    local_fleet.modelplane("up", "-f", fleet)
    back = wait_for("qwen3-8b's engine Deployment back on local-a", lambda: engine(local_fleet, "local-a", "qwen3-8b"))
    assert back["metadata"]["name"] == name and "--max-model-len=3072" in engine_args(local_fleet, "local-a", "qwen3-8b")
    assert holds(local_fleet, QWEN, ident)
