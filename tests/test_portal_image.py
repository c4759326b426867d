"""The portal's image (Dockerfile): built from this project's own files, nothing fetched but Python packages from
the package index, running as the user the portal's Deployment expects. Its shape is checked here; building and
pushing it needs a container builder and a registry (docs/portal.md)."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from workloads.aggregated_api import PREFIX, objects

ROOT = Path(__file__).resolve().parent.parent


def _instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
            for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_image_installs_the_project_from_its_own_files():
    steps = _instructions()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (base,) = [arg for op, arg in steps if op == "FROM"]
    image, _, tag = base.partition(":")
    assert image == "python" and tag and tag != "latest"  # a pinned Python, no moving tag
    floor = re.search(r">=\s*3\.(\d+)", project["project"]["requires-python"])
    assert floor and int(tag.split("-")[0].split(".")[1]) >= int(floor.group(1))
    assert not [arg for op, arg in steps if op == "ADD"]  # ADD fetches URLs and unpacks archives: COPY only
    copied = {src.rstrip("/") for op, arg in steps if op == "COPY" for src in shlex.split(arg)[:-1]}
    assert {"pyproject.toml", project["project"]["readme"]} <= copied  # what the build reads
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages <= copied, packages - copied  # every package the wheel holds
    assert all((ROOT / src).exists() for src in copied)
    entry = project["project"]["scripts"]["modelplane"].split(":")[0].split(".")[0]
    assert entry in copied
    runs = [arg for op, arg in steps if op == "RUN"]
    assert runs and all(re.search(r"\bpip install\b[^&]*\s/src\b", run) for run in runs)
    network = re.compile(r"https?://|git\+|\bcurl\b|\bwget\b|\bapt-get\b|\bapk\b")
    assert not [run for run in runs if network.search(run)]  # the package index is pip's only network


def test_the_image_runs_as_the_portals_user_and_leaves_the_venv_out():
    (user,) = [arg for op, arg in _instructions() if op == "USER"]
    (deployment,) = [o for o in objects({PREFIX: "enabled", f"{PREFIX}-image": "r/modelplane:0.1.0"})
                     if o["kind"] == "Deployment"]
    security = deployment["spec"]["template"]["spec"]["securityContext"]
    assert user.split(":")[0] == str(security["runAsUser"]) != "0"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored  # the build context is the project, not a 1.5 GB venv
