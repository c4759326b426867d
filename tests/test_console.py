"""The `modelplane` entry point tunes the cyclic collector for the process it runs in, and only there."""

import gc
import json
import pathlib
import subprocess
import sys

from automation.cli import main

ROOT = pathlib.Path(__file__).resolve().parent.parent
REPORT = ("import atexit, gc, os, sys\n"
          "atexit.register(lambda: print('collector', gc.isenabled(), gc.get_threshold(), file=sys.stderr))\n"
          "atexit.register(lambda: print('grpc', os.environ.get('GRPC_VERBOSITY'), file=sys.stderr))\n"
          "from automation.cli.console import main\n"
          "sys.argv = ['modelplane', *sys.argv[1:]]\n"
          "sys.exit(main())\n")


def console(*args: str, env: dict | None = None) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-c", REPORT, *args], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=env)
    return done.returncode, done.stdout, done.stderr


def test_a_batch_command_runs_without_the_collector_and_answers_as_main_does(capsys):
    code, out, err = console("plan", "-f", "examples", "-o", "json")
    assert code == 0 and "collector False (50000, 20, 100)" in err, err
    assert main(["plan", "-f", str(ROOT / "examples"), "-o", "json"]) == 0
    assert json.loads(out) == json.loads(capsys.readouterr().out)


def test_a_long_command_keeps_the_collector():
    code, _, err = console("up", "--help")
    assert code == 0 and "collector True (50000, 20, 100)" in err, err


def test_main_in_a_test_process_leaves_the_collector_alone(capsys):
    threshold = gc.get_threshold()
    assert main(["validate", "-f", str(ROOT / "examples")]) == 0
    assert gc.isenabled() and gc.get_threshold() == threshold


def test_grpc_logs_only_errors_unless_the_user_asks_for_more():
    import os

    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    assert "grpc ERROR" in console("up", "--help", env=env)[2]
    assert "grpc DEBUG" in console("up", "--help", env={**env, "GRPC_VERBOSITY": "DEBUG"})[2]
