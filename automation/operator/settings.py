"""Where and how the operator executor runs the fleet's stacks: one settings file, checked strictly.

`up|preview|destroy|status|serve --executor operator` read it (default `modelplane-operator.yaml`,
or `--operator-settings FILE`); it is meant to be committed beside the fleet's manifests. It names the
control-plane cluster (a kubeconfig file and context, read by the Kubernetes client and never printed)
and everything `operator export` takes as flags. It never holds a secret value: credentials are named
Kubernetes Secrets.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Callable, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from automation.operator.git_source import pinned_commit
from automation.operator.export import PULUMI_IMAGE, ExportError, ExportOptions
from automation.execution.runner import AutomationError

DEFAULT_FILE = "modelplane-operator.yaml"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")


def _secret_name(value: str) -> str:
    if not _DNS_SUBDOMAIN.match(value):
        raise ValueError(f"{value!r} is not a Secret name (a DNS subdomain)")
    return value


SecretName = Annotated[str, AfterValidator(_secret_name)]  # one rule for every Secret the settings name


class SettingsError(AutomationError):
    pass


class GitAuth(BaseModel):
    """A Secret in `namespace` holding the repository's credentials: key `accessToken` (mode accessToken),
    `sshPrivateKey` (sshAuth), or `username` and `password` (basicAuth)."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["accessToken", "sshAuth", "basicAuth"]
    secret: SecretName


class CredentialFile(BaseModel):
    """A Secret in `namespace` whose key holds a credential file, mounted into every workspace (never read here)."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    secret: SecretName
    key: str = "credentials.json"

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        if not _SECRET_KEY.match(value):
            raise ValueError(f"{value!r} is not a Secret key (letters, digits, '-', '_', '.')")
        return value

    def pair(self) -> tuple[str, str]:
        return self.secret, self.key


class Credentials(BaseModel):
    """How GKE and Nebius kubeconfigs sign in inside a workspace pod (docs/operator.md, "Cloud credentials")."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    gcp: CredentialFile | None = None  # a GCP service account key: GOOGLE_APPLICATION_CREDENTIALS
    nebius: CredentialFile | None = None  # a Nebius service account's authorized key (with an image with the CLI)


class OperatorSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)

    backend: str  # the stacks' Pulumi backend: s3://, gs://, azblob:// or a Pulumi Cloud URL
    git_url: str  # this project's repository, with the fleet's manifests in it
    git_ref: str = "main"  # a branch, a tag or a 40-hex commit; the workspaces clone the commit it resolves to
    git_auth: GitAuth | None = None  # a private repository: how the workspaces authenticate
    repo_dir: str = "."
    fleet_dir: str = "fleet"
    namespace: str = "modelplane-stacks"
    image: str = PULUMI_IMAGE
    secrets: tuple[SecretName, ...] = ()  # Secrets in `namespace` whose keys become every workspace's environment
    credentials: Credentials = Credentials()  # credential files mounted into every workspace (GKE, Nebius)
    organization: str = "organization"
    kubeconfig: str | None = None  # the control-plane cluster's kubeconfig (default: $KUBECONFIG, ~/.kube/config)
    context: str | None = None
    poll_seconds: float = Field(5.0, gt=0, le=300)  # how often a Stack's status is read
    timeout_minutes: float = Field(120.0, gt=0)  # how long to wait for one stack's result before reporting it

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if not _DNS_LABEL.match(value):
            raise ValueError("must be a DNS label (lowercase letters, digits and '-')")
        if len(value) > 55:  # previews run in <namespace>-preview, a DNS label too
            raise ValueError("must be at most 55 characters (previews run in <namespace>-preview)")
        return value

    def export_options(self, fleet_name: str | None = None, resolve: Callable[[str, str], str] = pinned_commit
                       ) -> ExportOptions:
        """The export's options, with gitRef resolved to the commit the remote's branch or tag is at now."""
        try:
            return ExportOptions(backend=self.backend, git_url=self.git_url,
                                 git_ref=resolve(self.git_url, self.git_ref) if self.git_url else self.git_ref,
                                 repo_dir=self.repo_dir, fleet_dir=self.fleet_dir, namespace=self.namespace,
                                 image=self.image, secrets=tuple(self.secrets), organization=self.organization,
                                 fleet_name=fleet_name,
                                 git_auth=(self.git_auth.mode, self.git_auth.secret) if self.git_auth else None,
                                 gcp_credentials=self.credentials.gcp.pair() if self.credentials.gcp else None,
                                 nebius_credentials=self.credentials.nebius.pair() if self.credentials.nebius else None)
        except ExportError as exc:
            raise SettingsError(str(exc).replace("--backend", "backend").replace("--git-url", "gitUrl")
                                .replace("--git-ref", "gitRef")) from None

    def kubeconfig_path(self) -> Path:
        if self.kubeconfig:
            return Path(self.kubeconfig).expanduser()
        first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
        return Path(first).expanduser() if first else Path.home() / ".kube" / "config"


def load_settings(path: str | Path) -> OperatorSettings:
    """The settings file, or one line naming the file and the field that is wrong."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SettingsError(f"{path}: no such file (the operator executor's settings: backend, gitUrl, kubeconfig, "
                            "...; see docs/operator.md)") from None
    except (OSError, yaml.YAMLError) as exc:
        raise SettingsError(f"{path}: cannot read it: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping of settings (backend, gitUrl, ...)")
    try:
        settings = OperatorSettings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(file)"
        raise SettingsError(f"{path}: {field}: {first['msg']}") from None
    settings.export_options(resolve=_unresolved)  # the backend and git URL are checked once, here
    return settings


def _unresolved(url: str, ref: str) -> str:
    """While checking the file: any ref stands for a commit (it is resolved when a run needs it)."""
    return "0" * 40
