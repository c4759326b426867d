"""Issue 65: no error, log line or start-up message quotes a secret from a file that holds secrets. A recognisable
value is planted in every error path found that reads one (the tokens file: bad YAML, bad schema, wrong types; a
kubeconfig: bad YAML, bad structure, a missing context, a key pasted where its path goes, an exec plugin that fails;
a v1/Secret manifest that is not YAML), and every message, log line and stderr is searched for it."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
import yaml

from automation.execution.kube import KubeClient, KubeError
from automation.portal.auth import Tokens, TokensFile, TokensFileError
from fleet.loader import parse_text
from tests.portal_server import free_port

SECRET = "PLANTED-s3cr3t-9f8e7d6c5b4a"  # 27 characters: a token as long as a real one

TOKENS_FILES = {
    "yaml: mapping in a scalar": f"- name: ops\n  token: {SECRET}: x\n",
    "yaml: bad indentation": f"- name: ops\n  token: {SECRET}\n   admin: true\n",
    "yaml: a tab": f"- name: ops\n\ttoken: {SECRET}\n",
    "yaml: unclosed flow": f"- {{name: ops, token: {SECRET}\n",
    "yaml: unclosed quote": f"- name: ops\n  token: '{SECRET}\n",
    "yaml: bad escape": f'- name: ops\n  token: "{SECRET}\\q"\n',
    "yaml: unknown tag": f"- name: ops\n  token: !{SECRET} x\n",
    "yaml: tag handle": f"- name: ops\n  token: !{SECRET}!x y\n",
    "yaml: alias": f"- name: ops\n  token: *{SECRET}\n",
    "yaml: control character": f"- name: ops\n  token: {SECRET}\x07\n",
    "yaml: unhashable key": f"- ? [{SECRET}]\n  : x\n",
    "schema: the token as a key": f"- {{name: ops, token {SECRET}}}\n",
    "schema: the token as a list item": f"- {SECRET}\n",
    "schema: the token alone": f"{SECRET}\n",
    "schema: both secrets": f"- {{name: ops, token: {SECRET}, tokenSha256: {'a' * 64}}}\n",
    "schema: a quota keyed by it": f"tokens: [{{name: ops, token: ops-token-00000001}}]\nquotas: {{{SECRET}: {{}}}}\n",
    "schema: a duplicate": f"- {{name: a, token: {SECRET}}}\n- {{name: b, token: {SECRET}}}\n",
    "types: a list": f"- {{name: ops, token: [{SECRET}]}}\n",
    "types: a mapping": f"- {{name: ops, token: {{{SECRET}: 1}}}}\n",
    "types: admin": f"- {{name: ops, token: ops-token-00000001, admin: {SECRET}}}\n",
    "types: a namespace": f"- {{name: ops, token: ops-token-00000001, namespaces: [{SECRET}]}}\n",
    "types: a name": f"- {{name: [{SECRET}], token: ops-token-00000001}}\n",
    "types: a number": f"- {{name: ops, token: ops-token-00000001, namespaces: {{{SECRET}: 1}}}}\n",
}


@pytest.mark.parametrize("text", TOKENS_FILES.values(), ids=TOKENS_FILES.keys())
def test_a_bad_tokens_file_never_quotes_a_token_when_loaded_or_reloaded(tmp_path, caplog, text):
    path = tmp_path / "tokens.yaml"
    path.write_text(text)
    with pytest.raises(TokensFileError) as caught:
        Tokens.load(path)
    assert SECRET not in str(caught.value)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)
    path.write_text(yaml.safe_dump([{"name": "ops", "token": "ops-token-00000001"}]))
    holder = TokensFile(path, check_every=0)
    path.write_text(text)
    with caplog.at_level(logging.DEBUG):
        holder.resolve("ops-token-00000001")  # the change is seen: reloaded
        holder.reload()
    assert caplog.records and SECRET not in caplog.text and SECRET not in (holder.last_error or "")


@pytest.mark.parametrize("name", ["yaml: mapping in a scalar", "schema: the token as a key"])
def test_serve_never_prints_a_token_of_a_bad_tokens_file(tmp_path, name):
    path = tmp_path / "tokens.yaml"
    path.write_text(TOKENS_FILES[name])
    path.chmod(0o600)
    result = subprocess.run([sys.executable, "-m", "automation.cli", "serve", "--tokens", str(path), "--port",
                             str(free_port()), "--data-dir", str(tmp_path / "d")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert SECRET not in result.stderr + result.stdout


GOOD = {"apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": SECRET}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}]}


def _kubeconfig(change) -> str:
    doc = yaml.safe_load(yaml.safe_dump(GOOD))
    change(doc)
    return yaml.safe_dump(doc)


KUBECONFIGS = {
    "yaml: unclosed flow": f"users:\n- name: u\n  user: {{token: {SECRET}\n",
    "yaml: bad indentation": f"users:\n- name: u\n  user:\n    token: {SECRET}\n   x: 1\n",
    "yaml: a tab": f"users:\n- name: u\n  user:\n\ttoken: {SECRET}\n",
    "yaml: unknown tag": f"users:\n- name: u\n  user: {{token: !{SECRET} x}}\n",
    "yaml: not utf-8": f"users: [{{name: u, user: {{token: {SECRET}\udcff}}}}]\n",
    "structure: users a mapping": _kubeconfig(lambda d: d.update(users={"token": SECRET})),
    "structure: a user without a name": _kubeconfig(lambda d: d["users"][0].pop("name")),
    "structure: a user not a mapping": _kubeconfig(lambda d: d["users"][0].update(user=SECRET)),
    "structure: a context's user a mapping": _kubeconfig(lambda d: d["contexts"][0]["context"].update(user={"token": SECRET})),
    "structure: no contexts": _kubeconfig(lambda d: d.pop("contexts")),
    "missing context": _kubeconfig(lambda d: d.update({"current-context": "gone"})),
    "a key where its path goes": _kubeconfig(lambda d: d["users"][0].update(user={"client-certificate-data": "Y2VydA==",
                                                                                 "client-key": SECRET})),
    "a token file where its path goes": _kubeconfig(lambda d: d["users"][0].update(user={"tokenFile": SECRET})),
    "bad key data": _kubeconfig(lambda d: d["users"][0].update(user={"client-certificate-data": SECRET,
                                                                     "client-key-data": SECRET})),
    "an exec plugin that fails": _kubeconfig(lambda d: d["users"][0].update(user={"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
        "args": ["-c", f"import sys; sys.stderr.write('token {SECRET} refused'); sys.exit(1)"]}})),
    "an exec plugin that answers garbage": _kubeconfig(lambda d: d["users"][0].update(user={"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
        "args": ["-c", f"print('{SECRET}')"]}})),
}


@pytest.mark.parametrize("context", [None, "ctx", "gone"])
@pytest.mark.parametrize("text", KUBECONFIGS.values(), ids=KUBECONFIGS.keys())
def test_a_bad_kubeconfig_never_quotes_its_token_or_key(tmp_path, caplog, capfd, text, context):
    path = tmp_path / "kubeconfig"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with caplog.at_level(logging.DEBUG):
        try:
            KubeClient(path, context)
        except KubeError as exc:
            assert SECRET not in str(exc) and "\n" not in str(exc)
    out, err = capfd.readouterr()
    assert SECRET not in caplog.text + out + err


SECRET_MANIFESTS = {
    "unknown tag": f"apiVersion: v1\nkind: Secret\nmetadata: {{name: hf, namespace: ml}}\nstringData:\n  token: !{SECRET} x\n",
    "bad escape": f'apiVersion: v1\nkind: Secret\nmetadata: {{name: hf, namespace: ml}}\nstringData:\n  token: "{SECRET}\\q"\n',
    "control character": f"apiVersion: v1\nkind: Secret\nstringData:\n  token: {SECRET}\x07\n",
}


@pytest.mark.parametrize("text", SECRET_MANIFESTS.values(), ids=SECRET_MANIFESTS.keys())
def test_a_secret_manifest_that_is_not_yaml_never_quotes_its_value(text):
    _, problems = parse_text(text, "secret.yaml")
    assert problems and all(SECRET not in str(p) for p in problems)
