"""``pulumi up -s <stage>`` by hand on a stage the release pipeline drives deploys what the pipeline promoted there (its
``promoted/<stage>`` record in the stage's state table), never the checkout's lock file or its Kubernetes version: the
program run as ``infra/__main__.py`` runs it (``run_main``), reading the table through boto3 from moto's DynamoDB."""

from __future__ import annotations

import json
from pathlib import Path

import pulumi
import pytest

from ami.lock import newest_in_lock
from infra.mocked import run_main
from platformctl.kernel.environment import FAKE_CREDENTIALS
from platformctl.kernel.state import open_store
from platformctl.kernel.state.dynamodb import create_table
from platformctl.kernel.state.promoted import Promoted, promote
from platformctl.kernel.topology import load_stage
from tests.infra.images import LOCK, stack_config

LT = "aws:ec2/launchTemplate:LaunchTemplate"
EKS = "aws:eks/cluster:Cluster"
PROD = load_stage("prod")
TABLE = "platformctl-state-prod"
PROMOTED = {"general": "ami-0feed0000000000a1", "ml": "ami-0feed0000000000a2"}  # not custom: never carried yet


def promoted_once(kubernetes_version: str = "1.31") -> Promoted:
    create_table(TABLE, PROD.region)
    record = Promoted("prod", dict(PROMOTED), "c-0042", 1.0e9, "arn:aws:sts::123456789012:assumed-role/release/tick",
                      infra_revision="0" * 40, kubernetes_version=kubernetes_version)
    store = open_store(f"dynamodb://{TABLE}?region={PROD.region}")
    promote(store, record)
    store.close()
    return record


def booted(run: object) -> set[str]:
    return {t.inputs["imageId"] for t in run.of_type(LT)}  # type: ignore[attr-defined]


def lock_images(*families: str) -> set[str]:
    lock = json.loads(LOCK.read_text())
    return {newest_in_lock(lock, p.image_family, PROD.region) or "" for c in PROD.clusters() for p in c.node_pools
            if not families or p.image_family in families}


def test_pulumi_up_by_hand_on_a_promoted_stage_deploys_the_promoted_images_and_version(account: None) -> None:
    promoted_once()
    assert lock_images().isdisjoint(PROMOTED.values())  # the checkout's lock says otherwise
    run = run_main("prod", stack_config("prod"))
    # each family the pipeline carried boots its promoted image; custom, which it never carried, the lock's newest
    assert booted(run) == set(PROMOTED.values()) | lock_images("custom")
    assert {c.inputs["version"] for c in run.of_type(EKS)} == {"1.31"}  # the stack file says 1.32


def test_pulumi_up_on_a_stage_the_pipeline_never_deployed_boots_the_lock_files_newest(account: None) -> None:
    create_table(TABLE, PROD.region)  # a table with no record in it
    run = run_main("prod", stack_config("prod"))
    assert booted(run) == lock_images()
    assert {c.inputs["version"] for c in run.of_type(EKS)} == {"1.32"}


def test_a_first_pulumi_up_before_the_stages_table_exists_boots_the_lock_files_newest(account: None) -> None:
    assert booted(run_main("prod", stack_config("prod"))) == lock_images()


def test_the_pipelines_own_deploy_carries_its_candidates_images_over_the_record(account: None) -> None:
    promoted_once()
    config = {**stack_config("prod"), "platformctl:imagesFromLock": True}
    assert booted(run_main("prod", config)) == lock_images()


def test_a_table_that_cannot_be_read_stops_pulumi_up_in_one_line_naming_the_stack_file(
        account: None, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in FAKE_CREDENTIALS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(pulumi.RunError) as err:
        run_main("prod", stack_config("prod"))
    message = str(err.value)
    assert "\n" not in message and message.startswith(PROD.source), message
    assert "config.platformctl:rotation.stateTable" in message and TABLE in message, message


def test_a_table_that_answers_describe_but_refuses_the_read_stops_pulumi_up_in_one_line(
        account: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from platformctl.kernel.state.base import StoreUnavailable
    from platformctl.kernel.state.dynamodb import DynamoDBStore

    promoted_once()

    def refused(self: object, stream: str) -> None:
        raise StoreUnavailable("dynamodb://platformctl-state-prod: AccessDeniedException: not authorized", transient=False)

    monkeypatch.setattr(DynamoDBStore, "last", refused)
    with pytest.raises(pulumi.RunError) as err:
        run_main("prod", stack_config("prod"))
    message = str(err.value)
    assert "\n" not in message and message.startswith(PROD.source) and "AccessDeniedException" in message, message


def test_pulumi_up_by_hand_refuses_a_new_familys_image_whose_kubelet_is_newer_than_the_kept_control_planes(
        account: None, tmp_path: Path) -> None:
    """custom, a family the pipeline never carried, boots the lock file's newest: an image built for 1.32 cannot join
    control planes the pipeline kept at 1.31 (a kubelet is never newer than its API server), so the program stops on
    one line naming the lock file's field, before any resource; built for 1.31, it deploys."""
    import boto3

    promoted_once("1.31")
    ec2 = boto3.client("ec2", region_name=PROD.region)
    image = ec2.register_image(Name="custom-2.0.0", RootDeviceName="/dev/xvda", Architecture="x86_64")["ImageId"]
    ec2.create_tags(Resources=[image], Tags=[{"Key": "platformctl:kubernetes-version", "Value": "1.32"}])
    lock = json.loads(LOCK.read_text())
    lock["images"]["custom"]["2.0.0"] = {PROD.region: image}
    (tmp_path / "images.lock.json").write_text(json.dumps(lock))
    config = {**stack_config("prod"), "platformctl:imageLock": str(tmp_path / "images.lock.json")}
    with pytest.raises(pulumi.RunError) as err:
        run_main("prod", config)
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(tmp_path / "images.lock.json")), message
    assert "images.custom" in message and "kubelet 1.32" in message and "1.31" in message and "c-0042" in message, message

    ec2.create_tags(Resources=[image], Tags=[{"Key": "platformctl:kubernetes-version", "Value": "1.31"}])
    assert image in booted(run_main("prod", config))


def test_a_kubelet_version_ec2_will_not_say_stops_pulumi_up_in_one_line(account: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from platformctl.kernel.errors import Unavailable

    promoted_once("1.31")

    def refused(region: str, images: list[str]) -> dict[str, str]:
        raise Unavailable(f"ec2:DescribeImages in {region}: UnauthorizedOperation: not authorized", transient=False)

    monkeypatch.setattr("infra.program.image_kubelets", refused)
    with pytest.raises(pulumi.RunError) as err:
        run_main("prod", stack_config("prod"))
    message = str(err.value)
    assert "\n" not in message and message.startswith(PROD.source) and "UnauthorizedOperation" in message, message
