"""The nodeadm NodeConfig in an instance's user data, read as nodeadm and the kubelet read it: what a node registers
with, and what keeps it from ever registering."""

from __future__ import annotations

import base64

import pytest

from platformctl.kernel.cluster.model import Taint
from platformctl.kernel.nodeadm import WontJoin, read_user_data, registration_labels, render_user_data


def mime(*parts: tuple[str, str]) -> str:
    body = "".join(f"--//\nContent-Type: {kind}\n\n{text}\n" for kind, text in parts)
    return base64.b64encode(f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="//"\n\n{body}--//--\n'.encode()).decode()


def node_config(cluster: str = "c1", flags: str = "") -> str:
    return f"apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: {cluster}\n" \
           f"  kubelet:\n    flags: [{flags}]\n"


def test_what_the_program_writes_is_what_the_kubelet_registers() -> None:
    labels = registration_labels("c1", "general", "general", "ami-0abc", {"team": "x"})
    taints = [Taint("nvidia.com/gpu", "true", "NoSchedule")]
    config = read_user_data(render_user_data("c1", "https://c1", "Y2E=", "172.20.0.0/16", labels, taints))
    assert config.cluster == "c1"
    assert config.labels == {"eks.amazonaws.com/nodegroup": "general", "platformctl.io/node-pool": "general",
                             "platformctl.io/node-type": "general", "platformctl.io/cluster": "c1",
                             "platformctl.io/image": "ami-0abc", "team": "x"}
    assert config.taints == (Taint("nvidia.com/gpu", "true", "NoSchedule"),)


def test_several_node_config_parts_merge_in_order_and_other_parts_are_ignored() -> None:
    data = mime(("text/x-shellscript", "#!/bin/bash\necho hi"),
                ("application/node.eks.aws", node_config("c1", '"--node-labels=a=1"')),
                ("application/node.eks.aws", node_config("c2", '"--node-labels=b=2", "--register-with-taints=k=:NoExecute"')))
    config = read_user_data(data)
    assert (config.cluster, config.labels, config.taints) == ("c2", {"a": "1", "b": "2"}, (Taint("k", "", "NoExecute"),))


@pytest.mark.parametrize(("data", "why"), [
    (None, "no user data"),
    (base64.b64encode(b"#!/bin/bash\n/etc/eks/bootstrap.sh c1\n").decode(), "no application/node.eks.aws part"),
    (mime(("application/node.eks.aws", "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec: {}\n")),
     "names no cluster"),
    # the kubelet refuses labels in its own namespaces that are not its own (NodeRestriction's set)
    (mime(("application/node.eks.aws", node_config(flags='"--node-labels=node-role.kubernetes.io/worker=true"'))),
     "unknown 'kubernetes.io' or 'k8s.io' labels"),
    (mime(("application/node.eks.aws", node_config(flags='"--node-labels=team=a b"'))), "not a valid label value"),
    (mime(("application/node.eks.aws", node_config(flags='"--register-with-taints=k=v:Sometimes"'))), "has no effect"),
])
def test_user_data_that_would_not_bring_up_a_kubelet_that_registers(data: str | None, why: str) -> None:
    with pytest.raises(WontJoin, match=why):
        read_user_data(data)


def test_the_kubelets_own_namespaces_allow_its_prefixes() -> None:
    data = mime(("application/node.eks.aws", node_config(
        flags='"--node-labels=node.kubernetes.io/lifecycle=normal,kubelet.kubernetes.io/x=y,topology.kubernetes.io/zone=a"')))
    assert read_user_data(data).labels["node.kubernetes.io/lifecycle"] == "normal"
