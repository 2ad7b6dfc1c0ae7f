"""How an instance of a self-managed node group joins its cluster: the ``nodeadm`` NodeConfig in its user data.

The Pulumi program writes it (``render_user_data``, from ``infra/components/node_pool.py``) into every launch
template version; the local region reads it back from the instance the way nodeadm and the kubelet do
(``read_user_data``), so a node carries exactly what its user data asks for and nothing more. Both sides live here,
in the kernel, so that the pure simulation's pools ask for the same labels (``registration_labels``) as the program.

The reading side copies the real tools' rules, not this module's writing side:

- nodeadm reads the MIME multi-part user data and takes the parts of content type ``application/node.eks.aws``
  (awslabs/amazon-eks-ami, ``nodeadm/internal/configprovider``); user data without one is a node that never joins.
  Several NodeConfig parts are merged in order; ``spec.cluster.name`` names the cluster the kubelet joins.
- the kubelet refuses to start on ``--node-labels`` in the ``kubernetes.io`` / ``k8s.io`` namespaces outside the
  allowed prefixes and keys (kubernetes/kubernetes ``cmd/kubelet/app/options/options.go``, ``ValidateKubeletFlags``,
  ``knownLabelNamespaces`` / ``kubeletapis.IsKubeletLabel``), and on a label or taint that is not well formed: such a
  node never registers either.
"""

from __future__ import annotations

import base64
import binascii
import email
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import yaml

from platformctl.kernel.cluster.model import LABEL_IMAGE, LABEL_NODE_TYPE, LABEL_NODEGROUP, Taint

CONTENT_TYPE = "application/node.eks.aws"
LABEL_POOL = "platformctl.io/node-pool"
LABEL_CLUSTER = "platformctl.io/cluster"

# The kubelet's own self-labels that --node-labels may set in the kubernetes.io / k8s.io namespaces.
_KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os", "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region", "topology.kubernetes.io/zone", "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os", "beta.kubernetes.io/instance-type", "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
})
_KUBELET_PREFIXES = ("kubelet.kubernetes.io", "node.kubernetes.io")
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def registration_labels(cluster: str, pool: str, node_type: str, image: str,
                        extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The labels a pool's launch template asks the kubelet for: the pool (under EKS's own key, which the toolkit
    reads pools by, and the program's), its node type, its cluster, the image the version boots, then the pool's
    own labels."""
    return {LABEL_NODEGROUP: pool, LABEL_POOL: pool, LABEL_NODE_TYPE: node_type, LABEL_CLUSTER: cluster,
            LABEL_IMAGE: image, **(extra or {})}


def render_user_data(cluster: str, endpoint: str, certificate_authority: str, service_cidr: str,
                     labels: Mapping[str, str], taints: Sequence[Taint] = ()) -> str:
    """A MIME multi-part document with the AL2023 ``nodeadm`` NodeConfig, base64 encoded as EC2 wants it."""
    flags = ["--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items()))]
    if taints:
        flags.append("--register-with-taints=" + ",".join(f"{t.key}={t.value}:{t.effect}" for t in taints))
    config = {"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig", "spec": {
        "cluster": {"name": cluster, "apiServerEndpoint": endpoint, "certificateAuthority": certificate_authority,
                    "cidr": service_cidr},
        "kubelet": {"flags": flags},
    }}
    text = ("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\n"
            f"Content-Type: {CONTENT_TYPE}\n\n" + yaml.safe_dump(config, sort_keys=False) + "--//--\n")
    return base64.b64encode(text.encode()).decode()


@dataclass(frozen=True)
class NodeConfig:
    """What nodeadm hands the kubelet: the cluster it joins, and the labels and taints it registers with."""

    cluster: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()


class WontJoin(ValueError):
    """The user data would not bring up a kubelet that registers (the reason is the tool's own complaint)."""


def read_user_data(raw: str | bytes | None) -> NodeConfig:
    """The NodeConfig an instance's user data (base64, as EC2's ``DescribeInstanceAttribute`` answers it) gives
    its kubelet. Raises ``WontJoin`` with the reason when nodeadm or the kubelet would stop short of registering."""
    if not raw:
        raise WontJoin("the instance has no user data: nodeadm has no NodeConfig")
    try:
        text = base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        text = raw.decode() if isinstance(raw, bytes) else raw
    message = email.message_from_string(text)
    parts = [p for p in message.walk() if p.get_content_type() == CONTENT_TYPE]
    if not parts:
        raise WontJoin(f"the user data has no {CONTENT_TYPE} part: nodeadm has no NodeConfig")
    cluster = ""
    flags: list[str] = []
    for part in parts:
        try:
            doc = yaml.safe_load(str(part.get_payload()))
        except yaml.YAMLError as exc:
            raise WontJoin(f"nodeadm cannot read its NodeConfig: {exc}") from None
        if not isinstance(doc, dict) or doc.get("kind") != "NodeConfig":
            raise WontJoin("a node.eks.aws part that is not a NodeConfig")
        spec = doc.get("spec") or {}
        cluster = str((spec.get("cluster") or {}).get("name") or cluster)
        flags += [str(f) for f in ((spec.get("kubelet") or {}).get("flags") or [])]
    if not cluster:
        raise WontJoin("the NodeConfig names no cluster (spec.cluster.name)")
    labels: dict[str, str] = {}
    taints: list[Taint] = []
    for flag in flags:
        name, _, value = flag.partition("=")
        if name == "--node-labels":
            labels.update(_labels(value))
        elif name == "--register-with-taints":
            taints += _taints(value)
    return NodeConfig(cluster, labels, tuple(taints))


def _labels(value: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, value.split(",")):
        key, eq, val = item.partition("=")
        if not eq:
            raise WontJoin(f"--node-labels: {item!r} is not key=value")
        _check_key(key, "--node-labels")
        if val and (len(val) > 63 or not _NAME.match(val)):
            raise WontJoin(f"--node-labels: {val!r} is not a valid label value")
        namespace = key.partition("/")[0] if "/" in key else ""
        if (namespace == "kubernetes.io" or namespace.endswith(".kubernetes.io") or namespace == "k8s.io"
                or namespace.endswith(".k8s.io")):
            if key not in _KUBELET_LABELS and not any(namespace == p or namespace.endswith("." + p) for p in _KUBELET_PREFIXES):
                raise WontJoin(f"unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [{key}]")
        out[key] = val
    return out


def _taints(value: str) -> list[Taint]:
    out = []
    for item in filter(None, value.split(",")):
        kv, colon, effect = item.rpartition(":")
        if not colon or effect not in _EFFECTS:
            raise WontJoin(f"--register-with-taints: {item!r} has no effect of {', '.join(_EFFECTS)}")
        key, _, val = kv.partition("=")
        _check_key(key, "--register-with-taints")
        out.append(Taint(key, val, effect))
    return out


def _check_key(key: str, flag: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if not name or len(name) > 63 or not _NAME.match(name) or (slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))):
        raise WontJoin(f"{flag}: {key!r} is not a qualified name")
