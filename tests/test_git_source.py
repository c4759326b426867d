"""The commit the operator's workspaces clone: a branch or tag resolved with `git ls-remote`, against a real
repository on this machine; failures are one line that never shows a URL's credentials."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from automation.operator.git_source import GitRefError, pinned_commit, redacted


def git(cwd, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@example.com", "HOME": str(cwd), "PATH": "/usr/bin:/bin"}
                          ).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "f").write_text("1")
    git(tmp_path, "add", "f")
    git(tmp_path, "commit", "-q", "-m", "one")
    first = git(tmp_path, "rev-parse", "HEAD")
    git(tmp_path, "tag", "-a", "v1", "-m", "release one")  # annotated: its own object, pointing at `first`
    (tmp_path / "f").write_text("2")
    git(tmp_path, "commit", "-q", "-am", "two")
    return tmp_path, first, git(tmp_path, "rev-parse", "HEAD")


def test_a_branch_resolves_to_its_head_and_a_tag_to_its_commit(repo):
    path, first, head = repo
    assert pinned_commit(str(path), "main") == head
    assert pinned_commit(str(path), "refs/heads/main") == head
    assert pinned_commit(str(path), "v1") == first  # the commit, not the annotated tag's own object
    assert pinned_commit("https://unreachable.invalid/x", first) == first  # a commit is never looked up


def test_an_unknown_ref_or_an_unreadable_remote_is_one_clear_error(repo, tmp_path):
    path, _, _ = repo
    with pytest.raises(GitRefError, match="no such branch or tag"):
        pinned_commit(str(path), "nope")
    with pytest.raises(GitRefError, match="cannot read") as raised:
        pinned_commit("https://deploy:s3cr3t-token@127.0.0.1:9/acme/fleet.git", "main")
    assert "s3cr3t-token" not in str(raised.value) and "***@127.0.0.1:9" in str(raised.value)
    assert redacted("https://github.com/acme/fleet") == "https://github.com/acme/fleet"


def test_operator_export_pins_every_repository_stack_to_the_commit_the_branch_is_at(repo, tmp_path, capsys):
    import yaml

    from automation.cli import main
    from tests.test_operator import ROOT

    path, _, head = repo
    args = ["operator", "export", "-f", str(ROOT / "examples"), "--backend", "s3://b", "--git-url", str(path),
            "--fresh", "--gcp-credentials", "gcp-workspace"]
    assert main([*args, "--out", str(tmp_path / "out")]) == 0
    (platform,) = yaml.safe_load_all((tmp_path / "out" / "platform-byo-eu.yaml").read_text())
    assert platform["spec"]["commit"] == head and "branch" not in platform["spec"]
    capsys.readouterr()
    assert main([*args, "--git-ref", "no-such-branch", "--out", str(tmp_path / "bad")]) != 0
    err = capsys.readouterr().err
    assert "no such branch or tag" in err and "Traceback" not in err and not (tmp_path / "bad").exists()


# The operator's workspaces run the commit gitRef resolves to; the plan and the Stacks' fingerprints are made from
# the manifests here. `--executor operator` runs only when the two are the same tree (issue 61).

def _checkout(tmp_path):
    """This project's examples committed in a repository, as a fleet's checkout holds them."""
    import shutil

    from tests.test_operator import ROOT

    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "examples", root / "fleet")
    (root / "Pulumi.yaml").write_text("name: modelplane\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "fleet")
    return root, git(root, "rev-parse", "HEAD")


def test_the_local_tree_must_be_the_clean_commit_the_operator_runs(tmp_path):
    from automation.operator.git_source import local_tree_problem

    root, head = _checkout(tmp_path)
    fleet = root / "fleet"
    assert local_tree_problem(head, fleet) is None
    assert local_tree_problem(head, fleet / "platform" / "clusters.yaml") is None  # a file names its checkout too
    other = "f" * 40
    assert f"is at {head[:12]}, but gitRef resolves to {other[:12]}" in (local_tree_problem(other, fleet) or "")
    clusters = fleet / "platform" / "clusters.yaml"
    clusters.write_text(clusters.read_text().replace("nodeCount: 1", "nodeCount: 2", 1))
    assert "1 uncommitted change(s)" in (local_tree_problem(head, fleet) or "")
    assert "fleet/platform/clusters.yaml" in (local_tree_problem(head, fleet) or "")
    git(root, "checkout", "--", ".")
    (fleet / "models" / "new.yaml").write_text("{}\n")  # untracked: a manifest the plan reads, no commit holds
    assert "fleet/models/new.yaml" in (local_tree_problem(head, fleet) or "")
    (fleet / "models" / "new.yaml").unlink()
    (root / "notes").mkdir()
    (root / "notes" / "draft.md").write_text("x")  # outside repoDir: not what the workspaces fetch
    assert local_tree_problem(head, fleet, repo_dir="fleet") is None
    assert "notes/draft.md" in (local_tree_problem(head, fleet, repo_dir=".") or "")
    outside = tmp_path / "loose"
    outside.mkdir()
    assert "is not in a git checkout" in (local_tree_problem(head, outside) or "")


def test_up_on_the_operator_refuses_a_dirty_or_other_tree_before_writing_anything(tmp_path, capsys):
    from automation.cli import main
    from tests.fake_kube import FakeKube

    root, head = _checkout(tmp_path)
    kube = FakeKube(tmp_path)
    try:
        def up(commit: str) -> int:
            settings = kube.settings(tmp_path, gitRef=commit)
            return main(["up", "-f", str(root / "fleet"), "--executor", "operator", "--operator-settings",
                         str(settings), "--state", str(tmp_path / "state"), "--skip-check"])

        clusters = root / "fleet" / "platform" / "clusters.yaml"
        clusters.write_text(clusters.read_text().replace("nodeCount: 1", "nodeCount: 2", 1))
        assert up(head) == 2
        err = capsys.readouterr().err
        assert "uncommitted change(s)" in err and "fleet/platform/clusters.yaml" in err and "Traceback" not in err
        git(root, "commit", "-q", "-am", "grow the L4 pool")
        assert up(head) == 2  # committed, but the operator would still run the commit before it
        assert "gitRef resolves to" in capsys.readouterr().err
        assert kube.cluster.writes() == []
        assert up(git(root, "rev-parse", "HEAD")) == 0  # the clean tree the operator runs: handed over
        assert kube.cluster.stacks()
    finally:
        kube.close()


@pytest.mark.parametrize("setting, where", [
    ({"secrets": ["Bad_Name"]}, "secrets.0"),
    ({"gitAuth": {"mode": "accessToken", "secret": "Bad_Name"}}, "gitAuth.secret"),
    ({"credentials": {"gcp": {"secret": "Bad_Name"}}}, "credentials.gcp.secret"),
    ({"credentials": {"nebius": {"secret": "ok", "key": "a/b"}}}, "credentials.nebius.key"),
])
def test_every_secret_the_operator_settings_name_is_held_to_kubernetes_rules(tmp_path, setting, where):
    """One rule (automation/operator/settings.py `SecretName`) for every Secret the settings name: a bad name is one
    message naming the file and the field, before anything is exported."""
    from automation.operator.settings import SettingsError, load_settings

    path = tmp_path / "operator.yaml"
    path.write_text(yaml.safe_dump({"backend": "s3://b", "gitUrl": "https://g/x", **setting}))
    with pytest.raises(SettingsError) as raised:
        load_settings(path)
    said = str(raised.value)
    assert said.startswith(f"{path}: {where}: ") and ("Bad_Name" in said or "'a/b'" in said), said
