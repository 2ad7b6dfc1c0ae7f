"""Drift beyond the image: which nodes their group would launch otherwise now. A node launched from one version of its
group's launch template, while the group launches another whose settings differ (an instance type, user data: the
node's labels, taints, kubelet flags; its disks, security groups, profile), runs what nobody would launch today though
its image is its pool's: it is rotated with the cause ``launch-template`` (``RotationPolicy.due``), exactly those nodes,
under the same budgets and gates. Read through the node-group seam; a version's settings only, never its tags."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from platformctl.kernel.cluster.model import Node
from platformctl.kernel.nodegroups import GroupState, LaunchSpec


def launch_drift(launched_with: Callable[[Sequence[str]], Mapping[str, LaunchSpec]], nodes: Sequence[Node],
                 group_of: Mapping[str, str], described: Mapping[str, GroupState]) -> dict[str, str]:
    """Node -> how its group's launch template differs now from the version it was launched with, in words (the
    versions and the settings that differ); a node whose group or launch is not known is not in it. ``launched_with``:
    the node-group seam's (or a cache of it: an instance's launch never changes)."""
    current = {n.name: described[group_of[n.name]].launch for n in nodes
               if n.name in group_of and group_of[n.name] in described}
    asked = [n.instance_id for n in nodes if n.instance_id and current.get(n.name) is not None]
    if not asked:
        return {}
    launched = launched_with(asked)
    out: dict[str, str] = {}
    for node in nodes:
        now, was = current.get(node.name), launched.get(node.instance_id or "")
        if now is None or was is None:
            continue
        changed = was.changed(now)
        if changed:
            out[node.name] = (f"launched from {was.template} version {was.version}; its group launches version "
                              f"{now.version}, whose {', '.join(changed)} differ")
    return out


def as_deployed(drift: Mapping[str, str], group_of: Mapping[str, str], described: Mapping[str, GroupState],
                deployed: Mapping[str, LaunchSpec] | None) -> dict[str, str]:
    """``drift`` in a stage the release pipeline drives: only the nodes of a group that launches what the pipeline's own
    last deploy there left it launching (``deployed``: group -> its launch then, from the stage's ``promoted/<stage>``
    record; compared by template and settings, not by version number). A group that launches settings no deploy of
    the pipeline made (a version made by hand in EC2, a ``pulumi up`` of another program) has drifted: none of its nodes
    is rotated for them (the tick reports it). ``deployed`` None: not such a stage, all of ``drift``."""
    if deployed is None:
        return dict(drift)
    out: dict[str, str] = {}
    for node, why in drift.items():
        group = group_of.get(node, "")
        if not_as_deployed(deployed, group, described[group].launch if group in described else None) == []:
            out[node] = why
    return out


def not_as_deployed(deployed: Mapping[str, LaunchSpec], group: str, now: LaunchSpec | None) -> list[str] | None:
    """The settings ``group`` launches (``now``) otherwise than the release pipeline's last deploy left it launching
    (``deployed``, from the stage's record); None when either is not known. The rotation (``as_deployed``) and the
    tick's drift check (``StageOperator.launching``) both ask this."""
    was = deployed.get(group)
    return None if was is None or now is None else was.changed(now)
