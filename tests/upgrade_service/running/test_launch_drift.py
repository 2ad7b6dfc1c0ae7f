"""Drift beyond the image (issue 66, item 5), on the local region's EC2 and Auto Scaling: a new launch template version
with the same image and another setting (a node label in the user data) puts exactly that pool's nodes in the plan,
with the cause ``launch-template``, and a rotation replaces exactly them, without harm, with nodes that carry it."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from platformctl.emulator.local_region import LocalRegion
from platformctl.kernel.cluster.model import Snapshot
from platformctl.kernel.nodegroups.aws import AutoScalingNodeGroups
from platformctl.kernel.state.sqlite import SQLiteStore
from tests.platformctl.emulator import test_local_region
from tests.upgrade_service.rotation import NO_HARM, harm
from upgrade_service.planning.plan import plan_cluster
from upgrade_service.planning.policy import Due, parse_policy
from upgrade_service.planning.targets import resolve
from upgrade_service.running.execute import Executor
from upgrade_service.running.launches import launch_drift
from upgrade_service.running.run_types import Options, RunStatus, Target

region, built_lock = test_local_region.region, test_local_region.built_lock  # dev's region, its images built first


def label_by_hand(region: LocalRegion, template: str) -> dict[str, Any]:
    """A new version of ``template`` made in EC2 by hand: the same image, the label team=search added to the nodes'
    user data; answers the version it was made from."""
    ec2 = region.ec2()
    latest: dict[str, Any] = ec2.describe_launch_template_versions(LaunchTemplateName=template, Versions=["$Latest"])[
        "LaunchTemplateVersions"][0]
    user_data = base64.b64decode(latest["LaunchTemplateData"]["UserData"]).replace(b"--node-labels=", b"--node-labels=team=search,")
    ec2.create_launch_template_version(LaunchTemplateName=template, SourceVersion=str(latest["VersionNumber"]),
                                       LaunchTemplateData={"UserData": base64.b64encode(user_data).decode()})
    return latest


def test_a_template_version_with_a_new_label_and_the_same_image_rotates_exactly_its_pools_nodes(
        region: LocalRegion, tmp_path: Path) -> None:
    member = region.stage.member_clusters[0].name
    sim = region.cluster(member)
    groups = AutoScalingNodeGroups(region.stage.region)
    before = {n.name: n for n in sim.list_nodes()}
    general = {name for name, n in before.items() if n.labels.get("eks.amazonaws.com/nodegroup") == "general"}
    assert general and len(general) < len(before)
    # Nothing differs yet: no node is due for its launch template.
    snap = Snapshot(tuple(sim.list_nodes()), tuple(sim.list_pods()), tuple(sim.list_pdbs()))
    found = groups.instances([n.instance_id for n in snap.nodes if n.instance_id])
    group_of = {n.name: found[n.instance_id].group for n in snap.nodes if n.instance_id in found}
    described = {g: groups.describe(g) for g in set(group_of.values())}
    assert launch_drift(groups.launched_with, list(snap.nodes), group_of, described) == {}

    template = f"{member}-general"
    latest = label_by_hand(region, template)

    described = {g: groups.describe(g) for g in set(group_of.values())}
    drift = launch_drift(groups.launched_with, list(snap.nodes), group_of, described)
    assert set(drift) == general, drift  # exactly that pool's nodes
    assert all(f"version {latest['VersionNumber']}; its group launches version {latest['VersionNumber'] + 1}, whose UserData differ"
               in why for why in drift.values()), drift
    policy = parse_policy({"maxInFlight": 1}, "policy.yaml")
    policy = policy.with_targets(resolve(policy, list(snap.nodes), group_of, {g: d.image for g, d in described.items()}).images)
    plan = plan_cluster(snap, policy.with_launch_drift(drift), region.clock.now(), cluster=member)
    assert {n for w in plan.waves for n in w.nodes} == general
    node = sorted(general)[0]
    assert plan.view.by_name[node].due is Due.LAUNCH_TEMPLATE
    assert "needs rotation: launch template: launched from" in plan.explain(node)[0]

    outcome = Executor(Target(member, sim, groups), parse_policy({"maxInFlight": 1}, "policy.yaml"),
                       SQLiteStore(tmp_path / "state.db"), Options()).run()
    assert outcome.status is RunStatus.DONE, outcome.reason
    after = {n.name: n for n in sim.list_nodes()}
    assert not (general & set(after)) and set(before) - general <= set(after)  # exactly those replaced, the rest kept
    new = [n for name, n in after.items() if name not in before]
    assert len(new) == len(general) and all(n.labels.get("team") == "search" for n in new)
    assert {n.image for n in new} == {before[name].image for name in general} and harm(sim) == NO_HARM


def test_in_a_stage_the_pipeline_drives_only_the_settings_its_own_deploy_made_are_rolled_out(
        region: LocalRegion, tmp_path: Path) -> None:
    """A version made by hand in EC2 with the same image and a new label moves no node (its group launches what no
    deploy of the pipeline made: the tick calls it drift); once the pipeline's deploy has made it (the stage's record
    says its group launches it), exactly that pool's nodes are rotated onto it."""
    member = region.stage.member_clusters[0].name
    sim = region.cluster(member)
    groups = AutoScalingNodeGroups(region.stage.region)
    before = {n.name: n for n in sim.list_nodes()}
    general = {name for name, n in before.items() if n.labels.get("eks.amazonaws.com/nodegroup") == "general"}
    found = groups.instances([n.instance_id for n in before.values() if n.instance_id])
    names = sorted({found[n.instance_id].group for n in before.values() if n.instance_id in found})
    deployed = {g: spec for g in names if (spec := groups.describe(g).launch) is not None}  # the pipeline's last deploy
    promoted = frozenset(n.image for n in before.values() if n.image)
    assert len(deployed) == len(names) and len(names) > 1

    template = f"{member}-general"
    label_by_hand(region, template)

    def members() -> set[str]:  # every instance of the cluster's groups, as Auto Scaling has them
        return {i["InstanceId"] for g in region.autoscaling().describe_auto_scaling_groups(AutoScalingGroupNames=names)
                ["AutoScalingGroups"] for i in g["Instances"]}

    instances = members()

    policy = parse_policy({"maxInFlight": 1}, "policy.yaml")
    by_hand = Executor(Target(member, sim, groups), policy, SQLiteStore(tmp_path / "by-hand.db"),
                       Options(promoted=promoted, deployed=deployed)).run()
    assert by_hand.status is RunStatus.DONE, by_hand.reason
    assert set(n.name for n in sim.list_nodes()) == set(before) and harm(sim) == NO_HARM  # 0 nodes moved
    assert members() == instances  # none terminated, none launched
    no_record = Executor(Target(member, sim, groups), policy, SQLiteStore(tmp_path / "no-record.db"),
                         Options(promoted=promoted)).run()  # a record written before it said what groups launch
    assert no_record.status is RunStatus.DONE and set(n.name for n in sim.list_nodes()) == set(before)

    deployed[template] = groups.describe(template).launch  # the pipeline's deploy made it: its record says so
    outcome = Executor(Target(member, sim, groups), policy, SQLiteStore(tmp_path / "deployed.db"),
                       Options(promoted=promoted, deployed=deployed)).run()
    assert outcome.status is RunStatus.DONE, outcome.reason
    after = {n.name: n for n in sim.list_nodes()}
    assert not (general & set(after)) and set(before) - general <= set(after)  # exactly that pool's nodes
    new = [n for name, n in after.items() if name not in before]
    assert len(new) == len(general) and all(n.labels.get("team") == "search" for n in new) and harm(sim) == NO_HARM
