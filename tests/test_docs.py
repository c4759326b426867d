"""Docs that cannot drift: every ```console block in the README and docs/ runs, and its output is compared.

A console block is commands (`$ modelplane ...`, run from the repository root with `.venv/bin` first
on PATH, in a fresh state folder) each followed by the output it prints: stdout, then stderr. In
the expected output, a line `...` stands for any number of lines, and `<anything>` inside a line for
any text. A command's exit code must be 0 unless its block says `# exit N` after the command.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

import click
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```console\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[str, int, str]]:
    out = []
    for path in DOCS:
        text = path.read_text()
        for match in BLOCK.finditer(text):
            out.append((path.name, text[: match.start()].count("\n") + 1, match.group(1)))
    return out


def steps(block: str) -> list[tuple[str, int, list[str]]]:
    """(command, expected exit code, expected output lines) for each `$ ` line of a block."""
    out: list[tuple[str, int, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            command, _, comment = line[2:].partition("  # exit ")
            out.append((command, int(comment) if comment else 0, []))
        elif out:
            out[-1][2].append(line)
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line by line; `...` matches any run of lines, `<...>` any text within a line."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(rest, actual[i:]) for i in range(len(actual) + 1))
    if not actual:
        return False
    pattern = "^" + ".*".join(re.escape(part) for part in re.split(r"<[^>]*>", head)) + "$"
    return bool(re.match(pattern, actual[0].rstrip())) and matches(rest, actual[1:])


@pytest.mark.parametrize("doc,line,block", blocks(), ids=[f"{d}:{n}" for d, n, _ in blocks()])
def test_console_block_runs_as_written(doc, line, block, tmp_path):
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{pathlib.Path(sys.executable).parent}"
                                 f"{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "200"}
    for command, code, expected in steps(block):
        argv = shlex.split(command.replace("--state .modelplane", f"--state {tmp_path / 'state'}"))
        if argv[0] == "modelplane" and "--state" not in argv and argv[1] in ("plan", "render", "status"):
            argv += ["--state", str(tmp_path / "state")]  # never the repository's own recorded state
        result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        actual = (result.stdout + result.stderr).rstrip("\n").splitlines()
        assert result.returncode == code, f"{doc}:{line}: `{command}` exited {result.returncode}\n{result.stderr}"
        assert matches([e.rstrip() for e in expected], actual), (
            f"{doc}:{line}: `{command}` printed:\n" + "\n".join(actual))


def test_there_are_runnable_blocks_in_the_readme_and_the_tutorial():
    names = {doc for doc, _, _ in blocks()}
    assert {"README.md", "tutorial.md"} <= names


SYNOPSIS = re.compile(r"`modelplane ([a-z]+)((?: [^`|]*?)?)`")


def synopses() -> list[tuple[str, str, str]]:
    """(doc, command, the options a one-command synopsis like `modelplane serve --tokens FILE [--port N]` names)."""
    out = []
    for path in DOCS:
        for match in SYNOPSIS.finditer(path.read_text()):
            out.append((path.name, match.group(1), match.group(2)))
    return out


def test_every_option_a_doc_names_exists_on_its_command():
    from automation.cli import cli

    stale = []
    for doc, name, rest in synopses():
        command = cli.commands.get(name)
        if command is None:
            stale.append(f"{doc}: `modelplane {name}` is not a command")
            continue
        if isinstance(command, click.Group):  # `modelplane operator export ...`: the subcommand's options
            sub, _, rest = rest.strip().partition(" ")
            if sub not in command.commands:
                stale.append(f"{doc}: `modelplane {name} {sub}` is not a command")
                continue
            command = command.commands[sub]
        known = {opt for param in command.params for opt in [*param.opts, *param.secondary_opts]}
        stale += [f"{doc}: `modelplane {name}` has no option {option}"
                  for option in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", rest) if option not in known]
    assert not stale, "\n".join(stale)


def test_the_serve_synopsis_names_every_serve_option():
    from automation.cli import cli

    options = {param.opts[0] for param in cli.commands["serve"].params if param.opts[0].startswith("--")}
    for doc in ("README.md", "portal.md"):
        heading = next(rest for d, name, rest in synopses() if d == doc and name == "serve" and "--tokens" in rest)
        missing = options - set(re.findall(r"--[\w-]+", heading))
        assert not missing, f"{doc}: the serve synopsis misses {sorted(missing)}"
