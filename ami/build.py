"""Building images from manifests with boto3: what must be rebuilt and why, then the builds themselves.

``plan_builds`` decides, parents before children, which images must be built. An image's
*fingerprint* is its resolved manifest's content hash plus the id of the image it starts from (its
parent's built image, or its resolved source), so an image is rebuilt exactly when its content, its
parent's image or its source image changed, and never otherwise. ``build_images`` carries a plan out:
generation by generation of the inheritance DAG, independent branches concurrently. For each image
it launches a builder instance from the base image with user data rendered from the manifest,
creates the image, waits until it is available, copies it to the extra regions, and only then tags
every copy with the fingerprint: that tag is the commit, so an image without it is never taken for
a finished build. It publishes the id under ``/platformctl/ami/<name>/<version>`` and
``/platformctl/ami/<name>/latest`` (the version parameter is withdrawn if ``latest`` cannot be
written), terminates the builder whatever happens, and removes what a failed build left behind.
Builds are idempotent: a rerun, from this process or another, finds the fingerprint and skips.
``write_lock`` records image name -> version -> region -> id for the Pulumi stacks and the release
pipeline.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ami.lock import newest_in_lock
from ami.manifest import ImageManifest, ManifestSet, Source
from platformctl.kernel import aws
from platformctl.kernel.environment import AwsTarget
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.nodegroups import BUILDER_TAG

TAG = "platformctl:"
BUILDER_TYPES = {"x86_64": "m6i.large", "arm64": "m7g.large"}


def fingerprint(image: ImageManifest, base_image: str) -> str:
    return hashlib.sha256(f"{image.content_hash}:{base_image}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class BuildStep:
    name: str
    reason: str


@dataclass
class BuildPlan:
    build: list[BuildStep]
    unchanged: dict[str, str]  # name -> its built image id

    def to_dict(self) -> dict[str, Any]:
        return {"build": [{"name": s.name, "reason": s.reason} for s in self.build],
                "unchanged": [{"name": n, "image_id": i} for n, i in self.unchanged.items()]}


@dataclass(frozen=True)
class BuiltImage:
    name: str
    version: str
    image_id: str
    fingerprint: str
    copies: dict[str, str]  # extra region -> image id
    built: bool  # False: an identical build already existed

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "image_id": self.image_id, "fingerprint": self.fingerprint,
                "copies": self.copies, "built": self.built}


class ImageStore:
    """The images and parameters of one account, through the project's boto3 clients."""

    def __init__(self, region: str, extra_regions: Iterable[str] = (), target: AwsTarget | None = None) -> None:
        self.region = region
        self.target = target  # which AWS (the command's: the local region's, or an account); None: the environment's
        self.extra_regions = tuple(r for r in extra_regions if r != region)
        self._local = threading.local()

    def ec2(self, region: str | None = None) -> Any:
        clients = self._local.__dict__.setdefault("clients", {})  # boto3 clients are made per thread
        key = ("ec2", region or self.region)
        if key not in clients:
            clients[key] = aws.client("ec2", key[1], target=self.target)
        return clients[key]

    def ssm(self) -> Any:
        clients = self._local.__dict__.setdefault("clients", {})
        if "ssm" not in clients:
            clients["ssm"] = aws.client("ssm", self.region, target=self.target)
        return clients["ssm"]

    def resolve_source(self, source: Source, where: str) -> str:
        from botocore.exceptions import ClientError

        try:
            if source.ami:
                self.ec2().describe_images(ImageIds=[source.ami])
                return source.ami
            if source.ssm_parameter:
                return self.ssm().get_parameter(Name=source.ssm_parameter)["Parameter"]["Value"]
            assert source.filter is not None
            images = self.ec2().describe_images(Owners=[source.filter.owner],
                                                Filters=[{"Name": "name", "Values": [source.filter.name]}])["Images"]
        except ClientError as exc:
            raise PlatformError(f"cannot resolve the source image ({exc.response['Error']['Message']})",
                                file=where, field="source") from None
        if not images:
            raise PlatformError(f"no image matches {source.describe()}", file=where, field="source")
        return max(images, key=lambda i: i.get("CreationDate", ""))["ImageId"]

    def find(self, fp: str, region: str | None = None) -> dict[str, Any] | None:
        images = self.ec2(region).describe_images(
            Owners=["self"], Filters=[{"Name": f"tag:{TAG}fingerprint", "Values": [fp]}])["Images"]
        return images[0] if images else None

    def latest(self, name: str) -> dict[str, Any] | None:
        images = self.ec2().describe_images(Owners=["self"], Filters=[{"Name": f"tag:{TAG}name", "Values": [name]},
                                                                      {"Name": "tag-key", "Values": [f"{TAG}fingerprint"]}])
        return max(images["Images"], key=lambda i: (i.get("CreationDate", ""), tags_of(i).get(f"{TAG}built-at", "")),
                   default=None)


def tags_of(image: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in image.get("Tags", [])}


EKS_SOURCE = re.compile(r"^/aws/service/eks/optimized-ami/(1\.\d+)/")
EKS_NAME = re.compile(r"^amazon-eks-node-(?:al2023-)?.*?(1\.\d+)-v")
JOINS = ("kubelet", "nodeadm")


def check_joins(manifests: ManifestSet) -> None:
    """Every image must be able to join a cluster: its tree starts from an EKS-optimised image (kubelet, containerd and
    nodeadm, which reads the launch template's NodeConfig) of its own ``kubernetesVersion``, or installs ``kubelet``
    and ``nodeadm`` itself. Plain Amazon Linux boots, runs, and never becomes a node. (A source given by AMI id cannot
    be told apart here: it is taken as it is.)"""
    for name in manifests.order():
        image = manifests.images[name]
        chain = [image]  # the image and its ancestors: what one installs, its children boot with
        while chain[-1].parent is not None:
            chain.append(manifests.images[chain[-1].parent])
        root = chain[-1]
        assert root.source is not None
        source, version = root.source, str(image.config["kubernetesVersion"])
        found = EKS_SOURCE.match(source.ssm_parameter or "") or EKS_NAME.match(source.filter.name if source.filter else "")
        if found:
            if found.group(1) != version:
                raise PlatformError(f"{version}, but the image starts from the EKS-optimised image for {found.group(1)} "
                                    f"({source.describe()}): its kubelet runs {found.group(1)}", file=image.file,
                                    field="kubernetesVersion")
            continue
        if source.ami or any(all(p in i.config.get("packages", ()) for p in JOINS) for i in chain):
            continue
        raise PlatformError(f"{source.describe()} has no kubelet or nodeadm, and neither {name} nor its parents install both: its instances "
                            f"would never join a cluster (start from /aws/service/eks/optimized-ami/{version}/"
                            f"amazon-linux-2023/{image.config['architecture']}/standard/recommended/image_id, or "
                            "install kubelet and nodeadm)", file=root.file, field="source")


def plan_builds(manifests: ManifestSet, store: ImageStore, only: Iterable[str] = ()) -> BuildPlan:
    """What a build would do, and why; ``only`` limits it to those images and the ancestors they need."""
    check_joins(manifests)
    wanted = set(only)
    for name in wanted:
        manifests.get(name)
    scope = set(manifests.images) if not wanted else wanted | {a for n in wanted for a in manifests.ancestors(n)}
    build: list[BuildStep] = []
    unchanged: dict[str, str] = {}
    rebuilt: set[str] = set()
    for name in manifests.order():
        if name not in scope:
            continue
        image = manifests.images[name]
        if image.parent is not None and image.parent in rebuilt:
            reason = f"parent {image.parent} is rebuilt"
        else:
            base = unchanged.get(image.parent) if image.parent else store.resolve_source(image.source, image.file)  # type: ignore[arg-type]  # no parent: a source
            if base is None:  # the parent is outside the scope and was never built
                raise PlatformError(f"parent {image.parent} has no built image yet: build it too", file=image.file,
                                    field="parent")
            existing = store.find(fingerprint(image, base))
            if existing is not None:
                unchanged[name] = existing["ImageId"]
                continue
            reason = _why(image, base, store.latest(name))
        build.append(BuildStep(name, reason))
        rebuilt.add(name)
    return BuildPlan(build, unchanged)


def _why(image: ImageManifest, base: str, last: dict[str, Any] | None) -> str:
    if last is None:
        return "never built"
    tags = tags_of(last)
    if tags.get(f"{TAG}content") != image.content_hash:
        before = tags.get(f"{TAG}version", "?")
        return "changed content" + (f" (version {before} -> {image.version})" if before != image.version else "")
    if tags.get(f"{TAG}base-image") != base:
        what = "new source image" if image.parent is None else f"parent {image.parent} has a new image"
        return f"{what} {base} (was {tags.get(f'{TAG}base-image', '?')})"
    return "no image with this fingerprint"


def render_user_data(image: ImageManifest) -> str:
    """The builder's provisioning script: packages, files, sysctls, kernel parameters, services, scripts."""
    c = image.config
    lines = ["#!/bin/bash", f"# platformctl image {image.name} {image.version} ({image.family})", "set -euo pipefail"]
    if c.get("packages"):
        lines.append("dnf install -y " + " ".join(shlex.quote(p) for p in c["packages"]))
    for path, spec in sorted(c.get("files", {}).items()):
        lines += [f"mkdir -p {shlex.quote(str(Path(path).parent))}",
                  f"cat > {shlex.quote(path)} <<'PLATFORMCTL_EOF'", spec["content"].rstrip("\n"), "PLATFORMCTL_EOF",
                  f"chmod {spec.get('mode', '0644')} {shlex.quote(path)}", f"chown {spec.get('owner', 'root:root')} {shlex.quote(path)}"]
    if c.get("sysctls"):
        lines.append("cat > /etc/sysctl.d/99-platformctl.conf <<'PLATFORMCTL_EOF'")
        lines += [f"{k} = {v}" for k, v in sorted(c["sysctls"].items())]
        lines.append("PLATFORMCTL_EOF")
    if c.get("kernelParameters"):
        lines.append("grubby --update-kernel=ALL --args=" + shlex.quote(" ".join(c["kernelParameters"])))
    for service, state in sorted(c.get("services", {}).items()):
        lines.append(f"systemctl {'enable' if state == 'enabled' else 'disable'} {shlex.quote(service)}")
    for script in c.get("scripts", []):
        lines += [f"# script {script['name']}", script["run"].rstrip("\n")]
    return "\n".join(lines) + "\n"


@dataclass
class BuildReport:
    images: list[BuiltImage] = field(default_factory=list)
    ids: dict[str, str] = field(default_factory=dict)  # every image's current build: unchanged and new

    def to_dict(self) -> dict[str, Any]:
        return {"built": [i.to_dict() for i in self.images if i.built],
                "skipped": [i.to_dict() for i in self.images if not i.built]}


def build_images(manifests: ManifestSet, plan: BuildPlan, store: ImageStore, workers: int = 4,
                 progress: Callable[[str], None] = lambda _: None) -> BuildReport:
    """Carry out ``plan``: generation by generation, the images of one generation concurrently."""
    report = BuildReport(ids=dict(plan.unchanged))
    ids = report.ids  # filled in as images are built: children read their parents' ids from it
    todo = {s.name for s in plan.build}
    for name, image_id in plan.unchanged.items():  # a build that stopped after its commit is published now
        _publish(manifests.images[name], image_id, store)
        copied = _copy_missing(manifests.images[name], image_id, store, progress)
        if copied is not None:
            report.images.append(copied)
    for generation in manifests.generations():
        names = [n for n in generation if n in todo]
        if not names:
            continue
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(names)))) as pool:
            futures = {n: pool.submit(_build_one, manifests.images[n], ids, store, progress) for n in names}
            failures = []
            for name, future in futures.items():
                try:
                    built = future.result()
                except Exception as exc:
                    failures.append((name, exc))
                    continue
                ids[name] = built.image_id
                report.images.append(built)
        if failures:
            failed, error = failures[0]
            if isinstance(error, PlatformError):
                raise error
            raise PlatformError(f"build of {failed} failed: {error}", file=manifests.images[failed].file) from error
    return report


def _build_one(image: ImageManifest, ids: dict[str, str], store: ImageStore, progress: Callable[[str], None]) -> BuiltImage:
    base = ids[image.parent] if image.parent else store.resolve_source(image.source, image.file)  # type: ignore[arg-type]  # no parent: a source
    fp = fingerprint(image, base)
    existing = store.find(fp)
    if existing is not None:  # built meanwhile, by this or another process
        found = {r: i["ImageId"] for r in store.extra_regions if (i := store.find(fp, r)) is not None}
        _publish(image, existing["ImageId"], store)
        return BuiltImage(image.name, image.version, existing["ImageId"], fp, found, built=False)
    ec2 = store.ec2()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    tags = {**image.config.get("tags", {}), "Name": f"{image.name}-{image.version}", f"{TAG}name": image.name,
            f"{TAG}family": image.family, f"{TAG}version": image.version, f"{TAG}content": image.content_hash,
            f"{TAG}base-image": base, f"{TAG}built-at": stamp,
            f"{TAG}kubernetes-version": str(image.config["kubernetesVersion"])}
    if image.parent:
        tags[f"{TAG}parent"] = image.parent
    progress(f"{image.name}: launching a builder from {base}")
    instance = ec2.run_instances(
        ImageId=base, InstanceType=BUILDER_TYPES[image.architecture], MinCount=1, MaxCount=1,
        UserData=render_user_data(image),
        MetadataOptions={"HttpTokens": "required", "HttpPutResponseHopLimit": 1},
        TagSpecifications=[{"ResourceType": "instance", "Tags": aws.tag_list(
            {"Name": f"platformctl-builder-{image.name}", BUILDER_TAG: image.name})}],
    )["Instances"][0]["InstanceId"]
    created: list[tuple[str, str]] = []  # (region, image id) to remove if the build fails before its commit
    try:
        ec2.get_waiter("instance_running").wait(InstanceIds=[instance])
        name = f"platformctl-{image.name}-{image.version}-{fp[:12]}"
        image_id = ec2.create_image(
            InstanceId=instance, Name=name, Description=f"platformctl {image.name} {image.version} from {base}",
            TagSpecifications=_tagged(tags, "image", "snapshot"),  # as they are made: a failed build's are ours to remove
        )["ImageId"]
        created.append((store.region, image_id))
        ec2.get_waiter("image_available").wait(ImageIds=[image_id])
        snapshots = [m["Ebs"]["SnapshotId"] for i in ec2.describe_images(ImageIds=[image_id])["Images"]
                     for m in i.get("BlockDeviceMappings", []) if m.get("Ebs", {}).get("SnapshotId")]
        if snapshots:
            ec2.create_tags(Resources=snapshots, Tags=aws.tag_list(tags))
        copies: dict[str, str] = {}
        for region in store.extra_regions:
            progress(f"{image.name}: copying {image_id} to {region}")
            remote = store.ec2(region)
            copy = remote.copy_image(Name=name, SourceImageId=image_id, SourceRegion=store.region,
                                     Description=f"platformctl {image.name} {image.version}",
                                     TagSpecifications=_tagged(tags, "image", "snapshot"))["ImageId"]
            created.append((region, copy))
            remote.get_waiter("image_available").wait(ImageIds=[copy])
            copies[region] = copy
        for region, made in reversed(created):  # the commit: copies first, the home region last
            store.ec2(region).create_tags(Resources=[made], Tags=[{"Key": f"{TAG}fingerprint", "Value": fp}])
        created.clear()
    except Exception:
        for region, made in created:
            _remove_image(store, region, made, progress)
        raise
    finally:
        ec2.terminate_instances(InstanceIds=[instance])
    _publish(image, image_id, store)
    progress(f"{image.name}: built {image_id}")
    return BuiltImage(image.name, image.version, image_id, fp, copies, built=True)


def _copy_missing(image: ImageManifest, image_id: str, store: ImageStore,
                  progress: Callable[[str], None]) -> BuiltImage | None:
    """An image already built that a ``--copy-to`` region lacks is copied there (with its tags; the fingerprint last,
    the copy's commit), so a region added later gets the images without a rebuild. None when every region has one."""
    if not store.extra_regions:
        return None
    found = store.ec2().describe_images(ImageIds=[image_id])["Images"]
    tags = tags_of(found[0]) if found else {}
    fp = tags.get(f"{TAG}fingerprint")
    if not fp:
        return None
    lacking = [r for r in store.extra_regions if store.find(fp, r) is None]
    if not lacking:
        return None
    copies = {r: store.find(fp, r)["ImageId"] for r in store.extra_regions if r not in lacking}  # type: ignore[index]
    for region in lacking:
        progress(f"{image.name}: copying {image_id} to {region}")
        remote = store.ec2(region)
        copy = remote.copy_image(Name=found[0].get("Name") or f"platformctl-{image.name}-{image.version}-{fp[:12]}",
                                 SourceImageId=image_id, SourceRegion=store.region,
                                 Description=f"platformctl {image.name} {image.version}",
                                 TagSpecifications=_tagged({k: v for k, v in tags.items() if k != f"{TAG}fingerprint"},
                                                           "image", "snapshot"))["ImageId"]
        try:
            remote.get_waiter("image_available").wait(ImageIds=[copy])
            remote.create_tags(Resources=[copy], Tags=[{"Key": f"{TAG}fingerprint", "Value": fp}])
        except Exception:
            _remove_image(store, region, copy, progress)
            raise
        copies[region] = copy
    return BuiltImage(image.name, image.version, image_id, fp, copies, built=False)


def _tagged(tags: dict[str, str], *kinds: str) -> list[dict[str, Any]]:
    """``TagSpecifications`` putting ``tags`` on each kind of resource a call makes: an image and its snapshots carry
    ours from the moment they exist, so the build's role may tag and remove them, and only them (infra.access)."""
    return [{"ResourceType": kind, "Tags": aws.tag_list(tags)} for kind in kinds]


def _remove_image(store: ImageStore, region: str, image_id: str, say: Callable[[str], None] = lambda _: None) -> None:
    """What a failed build made, removed; one that cannot be (refused, gone from reach) is said, not raised: the
    build's own failure is the error, and the image carries no fingerprint, so no build ever counts it as made."""
    ec2 = store.ec2(region)
    try:
        described = ec2.describe_images(ImageIds=[image_id])["Images"]
        ec2.deregister_image(ImageId=image_id)
        for image in described:
            for mapping in image.get("BlockDeviceMappings", []):
                snapshot = mapping.get("Ebs", {}).get("SnapshotId")
                if snapshot:
                    ec2.delete_snapshot(SnapshotId=snapshot)
    except Exception as exc:
        say(f"could not remove {image_id} in {region}, which the failed build made: "
            f"{(str(exc).splitlines() or [type(exc).__name__])[0]} (remove it by hand)")


def _publish(image: ImageManifest, image_id: str, store: ImageStore) -> None:
    """Both parameters or neither: the version parameter is withdrawn if ``latest`` cannot be written."""
    ssm = store.ssm()
    version = f"/platformctl/ami/{image.name}/{image.version}"
    latest = f"/platformctl/ami/{image.name}/latest"
    current = _parameter(ssm, version)
    if current == image_id and _parameter(ssm, latest) == image_id:
        return
    ssm.put_parameter(Name=version, Value=image_id, Type="String", DataType="aws:ec2:image", Overwrite=True)
    try:
        ssm.put_parameter(Name=latest, Value=image_id, Type="String", DataType="aws:ec2:image", Overwrite=True)
    except Exception:
        if current is None:
            ssm.delete_parameter(Name=version)
        else:
            ssm.put_parameter(Name=version, Value=current, Type="String", DataType="aws:ec2:image", Overwrite=True)
        raise


def _parameter(ssm: Any, name: str) -> str | None:
    try:
        return ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ssm.exceptions.ParameterNotFound:
        return None


def write_lock(path: Path, manifests: ManifestSet, store: ImageStore, ids: dict[str, str]) -> dict[str, Any]:
    """Record name -> version -> region -> image id for ``ids`` (every image's current build); earlier versions stay."""
    try:
        lock = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        raise PlatformError("not valid JSON", file=str(path)) from None
    images = lock.setdefault("images", {})
    for name in manifests.order():
        if name not in ids:
            continue
        regions = {store.region: ids[name]}
        home = store.ec2().describe_images(ImageIds=[ids[name]])["Images"]
        fp = tags_of(home[0]).get(f"{TAG}fingerprint") if home else None
        for region in store.extra_regions:
            copy = store.find(fp, region) if fp else None
            if copy is not None:
                regions[region] = copy["ImageId"]
        images.setdefault(name, {})[manifests.images[name].version] = regions
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return lock


def ensure_stage_images(stage: Any, lock: Path, manifests: ManifestSet, copy_to: Iterable[str] = ()) -> BuildReport | None:
    """Build the image tree into the current AWS endpoint and record it in ``lock`` when a family the
    stage does not pin has no image there for the stage's region (a fresh local region), copying what is
    built to ``copy_to``; else None."""
    families = sorted({p.image_family for c in stage.clusters() for p in c.node_pools} - set(stage.topology.images))
    try:
        recorded = json.loads(lock.read_text()) if lock.exists() else {}
    except ValueError:
        recorded = {}
    if all(newest_in_lock(recorded, family, stage.region) for family in families):
        return None
    store = ImageStore(stage.region, copy_to)
    report = build_images(manifests, plan_builds(manifests, store), store, workers=2)
    write_lock(lock, manifests, store, report.ids)
    return report


@contextmanager
def aws_errors() -> Iterator[None]:
    """AWS being unreachable or refusing, under an ``ami`` command: one line (a ``PlatformError`` naming AWS), not a
    traceback. The image store's calls are boto3's; their errors are turned into the project's here, at that seam."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        yield
    except NoCredentialsError:
        raise PlatformError("no AWS credentials: set AWS_ENDPOINT_URL to the local region's endpoint, or configure "
                            "credentials", field="AWS") from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise PlatformError(f"{error.get('Code', 'error')}: {error.get('Message', '')}", field="AWS") from None
    except BotoCoreError as exc:
        raise PlatformError(str(exc), field="AWS") from None
