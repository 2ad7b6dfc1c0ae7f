"""Reaching clusters: a kubeconfig context and the Auto Scaling groups its nodes belong to, in the right region.

The region is never guessed from a zone's spelling (``us-west-2-lax-1a`` is a zone of ``us-west-2``): it is the one
given, else the stage's (the stack file that declares the cluster), else what the cluster's nodes say
(``topology.kubernetes.io/region``, as the kubelet labels them on EKS), else the AWS SDK's own default
(``AWS_REGION``). Each API is asked once here, so an unreachable one is a one-line error before anything changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from platformctl.app.platform import Platform
from platformctl.kernel.cluster.model import Node, Snapshot
from platformctl.kernel.errors import PlatformError

if TYPE_CHECKING:
    from platformctl.kernel.cluster.live import LiveCluster
    from platformctl.kernel.nodegroups import GroupState, NodeGroups
    from platformctl.kernel.state.promoted import Promoted
    from upgrade_service.planning.policy import RotationPolicy
    from upgrade_service.running.run_types import Target

LABEL_REGION = "topology.kubernetes.io/region"


def region_for(platform: Platform, cluster: str, nodes: Iterable[Node], given: str | None = None) -> str:
    """Where ``cluster``'s Auto Scaling groups are: see the module's docstring for the order."""
    if given:
        return given
    declared = platform.stage_of(cluster)
    if declared is not None:
        return declared.region
    labelled = sorted({n.labels[LABEL_REGION] for n in nodes if n.labels.get(LABEL_REGION)})
    if len(labelled) == 1:
        return labelled[0]
    if len(labelled) > 1:
        raise PlatformError(f"the nodes of {cluster} say they are in {', '.join(labelled)}: name the region of its "
                            "auto scaling groups", field="--region")
    default = platform.environment.aws.region
    if default:
        return default
    raise PlatformError(f"no stage of this checkout declares {cluster}, its nodes carry no {LABEL_REGION} label, and "
                        "AWS_REGION is not set: name the region of its auto scaling groups", field="--region")


def _nodes_of(live: LiveCluster) -> Iterator[Node]:
    yield from live.list_nodes()


def connect(platform: Platform, names: list[str], kubeconfig: str | None, region: str | None) -> dict[str, Target]:
    """A ``Target`` per cluster: the official client via kubeconfig, Auto Scaling via boto3 in the cluster's region."""
    from platformctl.app.nodegroups import node_groups
    from platformctl.kernel.cluster.live import LiveCluster
    from upgrade_service.running.run_types import Target

    target = platform.aws
    config = platform.kubeconfig(kubeconfig)
    targets = {}
    groups: dict[str, NodeGroups] = {}  # one client per region
    for name in names:
        live = LiveCluster.from_kubeconfig(config, name)
        where = region_for(platform, name, _nodes_of(live), region)  # listed only if nothing else names the region
        if where not in groups:
            groups[where] = node_groups(where, clock=live.clock, target=target, probe=True)  # its waits on the rotation's clock
        targets[name] = Target(name, live, groups[where])
    return targets


def groups_of(platform: Platform, snap: Snapshot, cluster: str,
              region: str | None) -> tuple[dict[str, str], dict[str, GroupState], dict[str, str]]:
    """Each node's auto scaling group, each group as AWS describes it (what it launches, its room), and each node its
    group would launch otherwise now (``launch-template``: ``upgrade_service.running.launches``)."""
    from platformctl.app.nodegroups import node_groups
    from upgrade_service.running.launches import launch_drift

    groups = node_groups(region_for(platform, cluster, snap.nodes, region), target=platform.aws)
    found = groups.instances([n.instance_id for n in snap.nodes if n.instance_id])
    group_of = {n.name: found[n.instance_id].group for n in snap.nodes if n.instance_id in found}
    described = {g: groups.describe(g) for g in sorted(set(group_of.values()))}
    return group_of, described, launch_drift(groups.launched_with, list(snap.nodes), group_of, described)


def launch_template_targets(platform: Platform, snap: Snapshot, cluster: str, policy: RotationPolicy,
                            region: str | None, promoted: Promoted | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """Pool -> what its auto scaling groups launch now, read from AWS, for a policy that names no targets (only the
    ``promoted`` images, in a stage the release pipeline drives, as a run takes them); and each node its group would
    launch otherwise now (in such a stage, only where its group launches what the pipeline's last deploy made, as a
    run)."""
    from upgrade_service.planning.targets import resolve
    from upgrade_service.running.launches import as_deployed

    group_of, described, drift = groups_of(platform, snap, cluster, region)
    images = {g: d.image for g, d in described.items()}
    if promoted is None:
        return resolve(policy, list(snap.nodes), group_of, images).images, drift
    return (resolve(policy, list(snap.nodes), group_of, images, promoted.image_ids).images,
            as_deployed(drift, group_of, described, promoted.launches))
