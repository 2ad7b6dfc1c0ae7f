"""Machine images: the account or region a build goes to, and a build (plan, build, lock file) as ``ami build`` and the
demo carry it out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ami.build import BuildPlan, BuildReport, ImageStore, aws_errors, build_images, plan_builds, write_lock
from ami.manifest import default_manifest_dir, load_manifests
from platformctl.app.platform import Platform
from platformctl.kernel.checkout import root


def image_store(platform: Platform, region: str | None, copy_to: tuple[str, ...] = ()) -> ImageStore:
    """The images of the account (or local region) the command reaches, in ``region`` and copied to ``copy_to``
    (building into a local region of several stages: every stage's AWS region gets them)."""
    local = platform.reached
    if local is not None and not copy_to:
        copy_to = tuple(dict.fromkeys(str((local.for_stage(s) or local.status)["region"]) for s in local.stages))
    return ImageStore(region or platform.aws.region or "us-west-2", copy_to, platform.aws)


def default_lock_file(platform: Platform) -> Path:
    """Where ``ami build`` records its images: the running local region's own lock file when building into it, else
    the checkout's ``ami/images.lock.json``."""
    local = platform.reached
    return local.image_lock if local else root("--lock-file") / "ami" / "images.lock.json"


def target_of(platform: Platform, region: str) -> str:
    """Where AWS calls go, for people: the local region, another endpoint, or an account (asked of STS)."""
    local = platform.reached
    if local is not None:
        return f"the local region of stage {local.status['stage']} (AWS endpoint {local.aws_endpoint}), region {region}"
    if platform.aws.endpoint:
        return f"AWS endpoint {platform.aws.endpoint}, region {region}"
    from platformctl.kernel import aws

    with aws_errors():
        account = aws.client("sts", region, target=platform.aws).get_caller_identity()["Account"]
    return f"AWS account {account}, region {region}"


@dataclass(frozen=True)
class BuildRequest:
    """Build what the manifests in ``manifest_dir`` (default: the checkout's) say is new, parents first, into
    ``store``, and record every image's current build in ``lock_file``."""

    store: ImageStore
    lock_file: Path
    manifest_dir: Path | None = None
    names: tuple[str, ...] = ()  # only these images and the ancestors they need
    workers: int = 4


@dataclass
class Built:
    folder: Path  # the manifests it read
    plan: BuildPlan
    report: BuildReport
    lock_file: Path


def build(request: BuildRequest, progress: Callable[[str], None] = lambda _: None) -> Built:
    """Plan, build and publish, then write the lock file; AWS's refusals are one line (``aws_errors``)."""
    folder = request.manifest_dir or default_manifest_dir()
    manifests = load_manifests(folder)
    with aws_errors():
        plan = plan_builds(manifests, request.store, request.names)
        report = build_images(manifests, plan, request.store, request.workers, progress=progress)
        write_lock(request.lock_file, manifests, request.store, report.ids)
    return Built(folder, plan, report, request.lock_file)
