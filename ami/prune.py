"""Retiring old images: retention, references, deprecation before deregistration, leftover snapshots.

``prune_images`` looks at every image a build made (tag ``platformctl:name``) in each region it is
given, and decides for each:

- **keep** it when it is the newest build of one of the newest ``keep`` versions of its image
  (semver order), or when anything still references it: the ``$Latest`` or ``$Default`` version of
  any launch template, the launch template version (or launch configuration) of any auto scaling
  group, an instance that is not terminated, a ``/platformctl/ami/<name>/latest`` parameter, a lock
  file, or an image pinned in a stack file (``topology.images``). A kept image that was deprecated
  gets its deprecation cancelled (**restore**).
- Otherwise it is retired in two steps. First it is **deprecated** (``EnableImageDeprecation``, at
  the next minute: EC2 refuses a time in the past), which hides it from other accounts' searches
  but keeps it launchable. Once it has been deprecated for ``grace``, a later run **deregisters**
  it, deletes its snapshots and withdraws its version parameter if that still names it. Until then
  it is **waiting**. With a grace of zero both steps happen in one run.

Superseded builds of a kept version (the same version rebuilt because its parent changed) and
builds that never committed (no fingerprint tag, older than a day: a builder killed mid-build) are
retired the same way. An image and its copies in other regions share a fate: a reference to one
keeps them all. Snapshots are tagged with the image they belonged to before it is
deregistered, so a run that dies between deregistering and deleting leaves nothing the next run
cannot find: every snapshot tagged by a build or a prune whose image is gone is deleted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import semver

from ami.build import TAG, ImageStore, tags_of
from platformctl.kernel import aws
from platformctl.kernel.environment import AwsTarget
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.humanize import human_duration
from platformctl.kernel.topology import parse_stage_file

PRUNED_IMAGE = f"{TAG}pruned-image"
ABANDONED_AFTER = timedelta(days=1)
EC2_TIME = "%Y-%m-%dT%H:%M:%S.000Z"  # how EC2 writes a DeprecationTime
LIVE_STATES = ["pending", "running", "stopping", "stopped"]


@dataclass(frozen=True)
class Decision:
    region: str
    name: str
    version: str
    image_id: str
    action: str  # keep | restore | deprecate | wait | deregister
    reason: str
    deprecation_time: str | None = None
    snapshots: tuple[str, ...] = ()
    deprecate_now: bool = False  # deprecate (at deprecation_time) before anything else


    def to_dict(self) -> dict[str, Any]:
        return {"region": self.region, "name": self.name, "version": self.version, "image_id": self.image_id,
                "action": self.action, "reason": self.reason, "deprecation_time": self.deprecation_time,
                "snapshots": list(self.snapshots)}


@dataclass
class PruneReport:
    decisions: list[Decision] = field(default_factory=list)
    snapshots_deleted: list[dict[str, str]] = field(default_factory=list)  # region, snapshot, image
    parameters_deleted: list[str] = field(default_factory=list)
    dry_run: bool = False

    def of(self, action: str) -> list[Decision]:
        return [d for d in self.decisions if d.action == action]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {action: [d.to_dict() for d in self.of(action)]
                               for action in ("keep", "restore", "deprecate", "wait", "deregister")}
        return out | {"snapshots_deleted": self.snapshots_deleted, "parameters_deleted": self.parameters_deleted,
                      "dry_run": self.dry_run}


class References:
    """Image id -> why something still uses it."""

    def __init__(self) -> None:
        self.why: dict[str, list[str]] = {}

    def add(self, image_id: str | None, why: str) -> None:
        if image_id:
            reasons = self.why.setdefault(image_id, [])
            if why not in reasons:
                reasons.append(why)


def file_references(lock_files: Iterable[Path], stack_files: Iterable[Path], refs: References) -> None:
    """Every image id a lock file records (every version, every region) or a stack file pins."""
    for path in lock_files:
        try:
            lock = json.loads(path.read_text())
        except OSError as exc:
            raise PlatformError(f"cannot read the lock file ({exc.strerror})", file=str(path)) from None
        except ValueError:
            raise PlatformError("not valid JSON", file=str(path)) from None
        images = lock.get("images") if isinstance(lock, dict) else None
        if not isinstance(images, dict):
            raise PlatformError("missing mapping of image name -> version -> region -> id", file=str(path), field="images")
        for name, versions in images.items():  # a shape it cannot read must not protect nothing silently
            if not isinstance(versions, dict):
                raise PlatformError("expected a mapping of version -> region -> id", file=str(path), field=f"images.{name}")
            for version, regions in versions.items():
                if not isinstance(regions, dict) or not all(isinstance(i, str) for i in regions.values()):
                    raise PlatformError("expected a mapping of region -> image id", file=str(path),
                                        field=f"images.{name}.{version}")
                for image_id in regions.values():
                    refs.add(image_id, f"lock file {path} ({name} {version})")
    for path in stack_files:
        stage = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        for family, image_id in parse_stage_file(path, stage).topology.images.items():
            refs.add(image_id, f"stack file {path} (topology.images.{family})")


def account_references(region: str, refs: References, target: AwsTarget | None = None) -> None:
    """What the account's launch templates, auto scaling groups, instances and parameters use in ``region``."""
    ec2 = aws.client("ec2", region, target=target)
    for page in ec2.get_paginator("describe_launch_template_versions").paginate(Versions=["$Latest", "$Default"]):
        for v in page["LaunchTemplateVersions"]:
            which = "$Default" if v.get("DefaultVersion") else "$Latest"
            refs.add(v.get("LaunchTemplateData", {}).get("ImageId"),
                     f"launch template {v['LaunchTemplateName']} version {v['VersionNumber']} ({which})")
    autoscaling = aws.client("autoscaling", region, target=target)
    configurations: set[str] = set()
    for page in autoscaling.get_paginator("describe_auto_scaling_groups").paginate():
        for group in page["AutoScalingGroups"]:
            specs = [group.get("LaunchTemplate")]
            mixed = group.get("MixedInstancesPolicy", {}).get("LaunchTemplate", {})
            specs.append(mixed.get("LaunchTemplateSpecification"))
            specs += [o.get("LaunchTemplateSpecification") for o in mixed.get("Overrides", [])]
            for spec in filter(None, specs):
                version = spec.get("Version") or "$Default"
                named = {"LaunchTemplateId": spec["LaunchTemplateId"]} if spec.get("LaunchTemplateId") else {
                    "LaunchTemplateName": spec["LaunchTemplateName"]}
                for v in ec2.describe_launch_template_versions(**named, Versions=[version])["LaunchTemplateVersions"]:
                    refs.add(v.get("LaunchTemplateData", {}).get("ImageId"),
                             f"auto scaling group {group['AutoScalingGroupName']} "
                             f"(launch template {v['LaunchTemplateName']} version {v['VersionNumber']})")
            if group.get("LaunchConfigurationName"):
                configurations.add(group["LaunchConfigurationName"])
    if configurations:
        for page in autoscaling.get_paginator("describe_launch_configurations").paginate(
                LaunchConfigurationNames=sorted(configurations)):
            for config in page["LaunchConfigurations"]:
                refs.add(config.get("ImageId"), f"launch configuration {config['LaunchConfigurationName']}")
    for page in ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-state-name", "Values": LIVE_STATES}]):
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                refs.add(instance.get("ImageId"), f"instance {instance['InstanceId']} ({instance['State']['Name']})")


def parameter_references(store: ImageStore, refs: References) -> dict[str, str]:
    """The published ids: ``latest`` parameters are references; returns every parameter name -> id."""
    published: dict[str, str] = {}
    for page in store.ssm().get_paginator("get_parameters_by_path").paginate(Path="/platformctl/ami", Recursive=True):
        for parameter in page["Parameters"]:
            published[parameter["Name"]] = parameter["Value"]
            if parameter["Name"].endswith("/latest"):
                refs.add(parameter["Value"], f"SSM parameter {parameter['Name']}")
    return published


def _version_key(version: str) -> tuple[int, Any]:
    return (1, semver.Version.parse(version)) if semver.Version.is_valid(version) else (0, version)


def _built_at(image: dict[str, Any]) -> tuple[str, str]:
    return (tags_of(image).get(f"{TAG}built-at", ""), image.get("CreationDate", ""))


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _next_minute(now: datetime) -> datetime:
    return (now + timedelta(minutes=1)).replace(second=0, microsecond=0)


def _decide(region: str, images: list[dict[str, Any]], keep: int, grace: timedelta, now: datetime,
            refs: References) -> list[Decision]:
    """Every image of one name in one region: keep it, or which step of its retirement is due."""
    committed = [i for i in images if f"{TAG}fingerprint" in tags_of(i)]
    by_version: dict[str, list[dict[str, Any]]] = {}
    for image in committed:
        by_version.setdefault(tags_of(image).get(f"{TAG}version", "?"), []).append(image)
    newest_versions = sorted(by_version, key=_version_key, reverse=True)[:keep]
    retained = {version: max(by_version[version], key=_built_at)["ImageId"] for version in newest_versions}
    newest = f"the newest {keep} versions" if keep > 1 else "the newest version"
    decisions = []
    for image in sorted(images, key=_built_at):
        tags = tags_of(image)
        name, version, image_id = tags.get(f"{TAG}name", "?"), tags.get(f"{TAG}version", "?"), image["ImageId"]
        deprecated = image.get("DeprecationTime")
        snapshots = tuple(m["Ebs"]["SnapshotId"] for m in image.get("BlockDeviceMappings", [])
                          if m.get("Ebs", {}).get("SnapshotId"))

        def decision(action: str, reason: str, at: str | None = deprecated, first: bool = False) -> Decision:
            return Decision(region, name, version, image_id, action, reason, at, snapshots, first)  # noqa: B023

        if image_id in refs.why or retained.get(version) == image_id:
            reasons = list(refs.why.get(image_id, []))
            if retained.get(version) == image_id:
                reasons.insert(0, f"newest build of {newest} ({', '.join(newest_versions)})")
            decisions.append(decision("restore" if deprecated else "keep", "; ".join(reasons), None))
            continue
        if f"{TAG}fingerprint" not in tags:
            created = image.get("CreationDate")
            if created and now - _parse_time(created) < ABANDONED_AFTER:
                decisions.append(decision("keep", "a build in progress (not committed yet)"))
                continue
            why = "a build that never committed"
        elif version in retained:
            why = f"superseded by {retained[version]} (version {version} rebuilt)"
        else:
            why = f"older than {newest} ({', '.join(newest_versions)})"
        if deprecated is None:
            at = _next_minute(now).strftime(EC2_TIME)
            if grace <= timedelta(0):
                decisions.append(decision("deregister", f"{why}; deprecated, and deregistered at once (grace 0)", at, True))
            else:
                decisions.append(decision("deprecate", f"{why}; deregistered once deprecated for {human_duration(grace.total_seconds())}", at, True))
        elif grace <= timedelta(0) or _parse_time(deprecated) + grace <= now:
            decisions.append(decision("deregister", f"{why}; deprecated since {deprecated}"))
        else:
            decisions.append(decision("wait", f"{why}; deprecated since {deprecated}, deregistered after "
                                              f"{(_parse_time(deprecated) + grace).strftime(EC2_TIME)}"))
    return decisions


def prune_images(store: ImageStore, *, keep: int, grace: timedelta, now: datetime, names: Iterable[str] = (),
                 lock_files: Iterable[Path] = (), stack_files: Iterable[Path] = (), dry_run: bool = False) -> PruneReport:
    """Decide for every image of ``names`` (all when empty) in the home and extra regions, then act unless ``dry_run``.

    Everything is read before anything changes, so a bad lock or stack file changes nothing.
    """
    if keep < 1:
        raise PlatformError("must keep at least one version of each image", field="keep")
    wanted = set(names)
    refs = References()
    file_references(lock_files, stack_files, refs)
    published = parameter_references(store, refs)
    report = PruneReport(dry_run=dry_run)
    regions = (store.region, *store.extra_regions)
    found: dict[str, list[dict[str, Any]]] = {}
    for region in regions:
        account_references(region, refs, store.target)
        found[region] = store.ec2(region).describe_images(
            Owners=["self"], Filters=[{"Name": "tag-key", "Values": [f"{TAG}name"]}])["Images"]
    # An image and its copies in other regions share a fate: a reference to one keeps them all.
    for image in [i for images in found.values() for i in images if i["ImageId"] in refs.why]:
        fp = tags_of(image).get(f"{TAG}fingerprint")
        for copy in [i for images in found.values() for i in images if fp and tags_of(i).get(f"{TAG}fingerprint") == fp]:
            if copy["ImageId"] != image["ImageId"]:
                refs.add(copy["ImageId"], f"a copy of {image['ImageId']}, which is kept")
    known = {tags_of(i)[f"{TAG}name"] for images in found.values() for i in images}
    if wanted - known:
        name = min(wanted - known)
        raise PlatformError(f"no image named {name!r} was ever built here (images: {', '.join(sorted(known)) or 'none'})",
                            field="NAMES")
    for region in regions:
        grouped: dict[str, list[dict[str, Any]]] = {}
        for image in found[region]:
            name = tags_of(image)[f"{TAG}name"]
            if not wanted or name in wanted:
                grouped.setdefault(name, []).append(image)
        for name in sorted(grouped):
            report.decisions += _decide(region, grouped[name], keep, grace, now, refs)
    for d in [] if dry_run else report.decisions:
        ec2 = store.ec2(d.region)
        if d.action == "restore":
            ec2.disable_image_deprecation(ImageId=d.image_id)
        if d.deprecate_now:
            ec2.enable_image_deprecation(ImageId=d.image_id, DeprecateAt=_parse_time(d.deprecation_time or ""))
        if d.action == "deregister":
            _deregister(store, d, published, report)
    for region in (store.region, *store.extra_regions):
        _delete_leftover_snapshots(store, region, report)
    return report


def _deregister(store: ImageStore, d: Decision, published: dict[str, str], report: PruneReport) -> None:
    ec2 = store.ec2(d.region)
    if d.snapshots:  # so that a run dying after the deregistration still finds them
        ec2.create_tags(Resources=list(d.snapshots), Tags=[{"Key": PRUNED_IMAGE, "Value": d.image_id}])
    ec2.deregister_image(ImageId=d.image_id)
    if d.region == store.region:
        parameter = f"/platformctl/ami/{d.name}/{d.version}"
        if published.get(parameter) == d.image_id:
            store.ssm().delete_parameter(Name=parameter)
            report.parameters_deleted.append(parameter)


def _delete_leftover_snapshots(store: ImageStore, region: str, report: PruneReport) -> None:
    """Snapshots a build or a prune tagged whose image is gone (a dry run only lists them)."""
    ec2 = store.ec2(region)
    in_use = {m["Ebs"]["SnapshotId"] for i in ec2.describe_images(Owners=["self"])["Images"]
              for m in i.get("BlockDeviceMappings", []) if m.get("Ebs", {}).get("SnapshotId")}
    for page in ec2.get_paginator("describe_snapshots").paginate(
            OwnerIds=["self"], Filters=[{"Name": "tag-key", "Values": [f"{TAG}name", PRUNED_IMAGE]}]):
        for snapshot in page["Snapshots"]:
            if snapshot["SnapshotId"] in in_use:
                continue
            if not report.dry_run:
                ec2.delete_snapshot(SnapshotId=snapshot["SnapshotId"])
            tags = tags_of(snapshot)
            report.snapshots_deleted.append({"region": region, "snapshot": snapshot["SnapshotId"],
                                             "image": tags.get(PRUNED_IMAGE, tags.get(f"{TAG}name", "?"))})
