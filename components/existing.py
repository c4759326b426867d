"""An existing (bring-your-own) InferenceCluster: nothing is provisioned.

Its kubeconfig is a Pulumi secret config value named after the cluster's
`existing.secretRef.name` (`pulumi config set --secret modelplane:<secretRef name> "$(cat kubeconfig)"`),
or a kubeconfig file and context named in stack config
(`modelplane:kubeconfigFiles: {<cluster>: {path: ..., context: ...}}`, or, in the automation
layer's one-cluster platform stack, `modelplane:kubeconfigFile`). Only the path is config: the
file is read by the program, so the kubeconfig never appears on a command line, and it is kept
a Pulumi secret end to end (in state, only as the stack's secret `kubeconfig` output).
"""

from __future__ import annotations

import os

import pulumi
import yaml

from components.args import ClusterArgs
from components.serving_stack import ClusterFacts
from components.inference_cluster import InferenceClusterComponent
from fleet.errors import ModelplaneError

TYPE = "modelplane:existing:InferenceCluster"


class MissingKubeconfig(ModelplaneError, pulumi.RunError):
    pass


def _from_file(path: str, context: str | None) -> str:
    text = open(os.path.expanduser(path)).read()
    if not context:
        return text
    config = yaml.safe_load(text) or {}
    if not any(c.get("name") == context for c in config.get("contexts") or []):
        raise MissingKubeconfig(f"kubeconfig file {path} has no context {context!r}")
    config["current-context"] = context
    return yaml.safe_dump(config)


def read_kubeconfig(args: ClusterArgs, config: pulumi.Config, stored: str | None = None) -> pulumi.Output[str]:
    """The kubeconfig, from (first to last) a file named in config, the value `stored` with the fleet (a v1/Secret
    given with -f, $MODELPLANE_SECRET_..., --secrets-dir: fleet/secrets.py), or secret config."""
    files = config.get_object("kubeconfigFiles") or {}
    if args.name in files:
        entry = files[args.name]
        return pulumi.Output.secret(_from_file(entry["path"], entry.get("context")))
    if config.get("cluster") == args.name and config.get("kubeconfigFile"):  # the automation layer's platform stack
        return pulumi.Output.secret(_from_file(config.require("kubeconfigFile"), config.get("kubeconfigContext")))
    if stored is not None:
        return pulumi.Output.secret(stored)
    value = config.get_secret(args.kubeconfig_secret) if args.kubeconfig_secret else None
    if value is None:
        from fleet.secrets import CLUSTER_SECRETS_NAMESPACE

        raise MissingKubeconfig(
            f"InferenceCluster/{args.name}: no kubeconfig; give a v1/Secret {CLUSTER_SECRETS_NAMESPACE}/"
            f"{args.kubeconfig_secret} with the manifests (-f), `--kubeconfig {args.name}=PATH` to modelplane, or "
            f"from a laptop `pulumi config set --secret modelplane:{args.kubeconfig_secret} \"$(cat kubeconfig)\"` "
            "or a file in modelplane:kubeconfigFiles")
    return value


class ExistingInferenceCluster(InferenceClusterComponent):
    """Outputs: kubeconfig (secret), cluster_identifier."""

    def __init__(self, name: str, args: ClusterArgs, kubeconfig: pulumi.Input[str],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE, name, None, opts)
        self.kubeconfig = pulumi.Output.secret(kubeconfig)
        self.cluster_identifier = args.name
        # Storage classes are the admin's (existing.cache.storageClassName); a load balancer only when the admin
        # says the cluster has one (components/args.py LOAD_BALANCER_ANNOTATION)
        self.facts = ClusterFacts(load_balancer=args.load_balancer)
        self.gpu_pools = []  # its nodes are the admin's
        self.register_outputs({"kubeconfig": self.kubeconfig, "clusterIdentifier": self.cluster_identifier})
