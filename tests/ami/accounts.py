"""Reading the image account the tests build into (moto), and changing manifests."""

from __future__ import annotations

from pathlib import Path

import boto3
from botocore.exceptions import ClientError

from ami.build import ImageStore, build_images, plan_builds, tags_of, write_lock
from ami.manifest import load_manifests

REGION, COPY = "us-west-2", "us-east-1"


def ec2(region: str = REGION):
    return boto3.client("ec2", region_name=region)


def images(region: str = REGION) -> dict[str, list[dict]]:
    """Our images in ``region``, by manifest name, oldest first."""
    out: dict[str, list[dict]] = {}
    for image in ec2(region).describe_images(Owners=["self"])["Images"]:
        name = tags_of(image).get("platformctl:name")
        if name:
            out.setdefault(name, []).append(image)
    for group in out.values():
        group.sort(key=lambda i: tags_of(i)["platformctl:built-at"])
    return out


def build(folder: Path, lock: Path | None = None) -> dict:
    manifests = load_manifests(folder)
    store = ImageStore(REGION, [COPY])
    plan = plan_builds(manifests, store)
    report = build_images(manifests, plan, store, workers=2)
    if lock is not None:
        write_lock(lock, manifests, store, report.ids)
    return {"plan": plan, "report": report}


def bump(folder: Path, name: str, old: str, new: str) -> None:
    path = folder / f"{name}.yaml"
    path.write_text(path.read_text().replace(old, new, 1))


def running_builders() -> list[str]:
    reservations = ec2().describe_instances(Filters=[{"Name": "tag-key", "Values": ["platformctl:builder"]}])["Reservations"]
    return [i["InstanceId"] for r in reservations for i in r["Instances"] if i["State"]["Name"] not in ("terminated", "shutting-down")]


def fail_on(operation: str, when=lambda params: True):
    """Make AWS refuse ``operation`` for clients made from now on (botocore's own event hooks); returns the undo."""
    def refuse(params: dict, **_: object) -> None:
        if when(params):
            raise ClientError({"Error": {"Code": "InternalError", "Message": f"{operation} refused by the test"}}, operation)

    session = boto3._get_default_session()
    event = f"before-parameter-build.{'ssm' if operation == 'PutParameter' else 'ec2'}.{operation}"
    session.events.register(event, refuse)
    return lambda: session.events.unregister(event, refuse)
