"""What mocked providers answer: outputs programs read, so they run to the end without a cloud.

Plain data, shared by the mock runtime (automation/checks/offline.py, `preview --offline`) and the test
double of the Pulumi CLI (tests/pulumi_engine.py), which imports it in every engine it starts.
"""

from __future__ import annotations

import copy

# Outputs a provider would return that programs read (so they can run to the end under mocks). A cluster's API
# endpoint is a loopback port where nothing listens: code that reaches for a mocked cluster (draining its load
# balancers before a destroy) is refused at once, and no address but loopback is ever dialled.
FAKE_OUTPUTS: dict[str, dict] = {
    "gcp:container/cluster:Cluster": {"endpoint": "127.0.0.1:1",
                                      "masterAuth": {"clusterCaCertificate": "b2ZmbGluZS1wcmV2aWV3"}},
    "eks:index:Cluster": {"kubeconfigJson": '{"apiVersion": "v1", "kind": "Config", "clusters": []}',
                          "clusterSecurityGroupId": "sg-0cluster"},
    "aws:ec2/launchTemplate:LaunchTemplate": {"latestVersion": 1},
    "kubernetes:gateway.networking.k8s.io/v1:Gateway": {"status": {"addresses": [{"type": "IPAddress",
                                                                                  "value": "203.0.113.20"}]}},
    "nebius:index/mk8sV1Cluster:Mk8sV1Cluster": {"status": {"controlPlane": {
        "endpoints": {"publicEndpoint": "https://127.0.0.1:1"},
        "auth": {"clusterCaCertificate": "-----BEGIN CERTIFICATE-----\nb2ZmbGluZQ==\n-----END CERTIFICATE-----\n"}}}},
    # VKE's kubeconfig is base64: "apiVersion: v1\nkind: Config\n"; Civo's is plain text
    "vultr:index/kubernetes:Kubernetes": {"kubeConfig": "YXBpVmVyc2lvbjogdjEKa2luZDogQ29uZmlnCg=="},
    "civo:index/kubernetesCluster:KubernetesCluster": {"kubeconfig": "apiVersion: v1\nkind: Config\n"},
}
# Results of provider functions (invokes) that programs read.
FAKE_CALLS: dict[str, dict] = {
    "azure-native:containerservice:listManagedClusterUserCredentials": {"kubeconfigs": [{
        "name": "clusterUser", "value": "YXBpVmVyc2lvbjogdjEKa2luZDogQ29uZmlnCg=="}]},  # "apiVersion: v1\nkind: Config\n"
}
# Components a provider constructs (remote components) answer their declared outputs, never their inputs: a
# ConfigGroup's is `resources`, its children (under mocks, none). Echoing a platform stack's 0.6 MB of CRDs back
# to the program was a fifth of the CPU of its offline preview.
COMPONENT_OUTPUTS: dict[str, dict] = {"kubernetes:yaml/v2:ConfigGroup": {"resources": []}}


def echoed(type_: str, inputs: dict) -> dict:
    """A resource's state as a provider first answers it, before the outputs it computes: its inputs, or for a
    component the provider constructs, its declared outputs alone."""
    return copy.deepcopy(COMPONENT_OUTPUTS[type_]) if type_ in COMPONENT_OUTPUTS else dict(inputs)
