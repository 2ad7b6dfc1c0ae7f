"""Which region a context's auto scaling groups are in: never guessed from a zone's spelling."""

from __future__ import annotations

from dataclasses import replace

import pytest

from platformctl.app.clusters import region_for
from platformctl.app.platform import Platform
from platformctl.emulator.simulator import build_node
from platformctl.kernel.cluster.model import Node
from platformctl.kernel.errors import PlatformError


def node(zone: str, region: str | None) -> Node:
    built = build_node(name=f"n-{zone}", zone=zone, region=region or "", instance_type="m6i.2xlarge", pool="general",
                       image="ami-1", instance_id="i-1")
    if region is None:  # a node without the label
        return replace(built, labels={k: v for k, v in built.labels.items() if k != "topology.kubernetes.io/region"})
    return built


def test_the_region_given_wins_then_the_stage_that_declares_the_cluster() -> None:
    assert region_for(Platform.from_os(), "anything", [node("us-east-1a", "us-east-1")], given="eu-west-1") == "eu-west-1"
    # dev-usw2a-01 is declared by infra/Pulumi.dev.yaml, in us-west-2, whatever its nodes say
    assert region_for(Platform.from_os(), "dev-usw2a-01", [node("eu-west-1a", "eu-west-1")]) == "us-west-2"


def test_a_cluster_no_stage_declares_is_where_its_nodes_say_even_in_a_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    # A Local Zone's name is not its region with a letter after it: the kubelet's label says where it is.
    assert region_for(Platform.from_os(), "edge-01", [node("us-west-2-lax-1a", "us-west-2")]) == "us-west-2"
    with pytest.raises(PlatformError) as two:
        region_for(Platform.from_os(), "edge-01", [node("us-west-2a", "us-west-2"), node("us-east-1a", "us-east-1")])
    assert two.value.field == "--region" and "us-east-1, us-west-2" in str(two.value)


def test_with_nothing_to_go_by_it_is_the_sdk_default_or_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    assert region_for(Platform.from_os(), "edge-01", [node("ap-south-1a", None)]) == "ap-south-1"
    monkeypatch.delenv("AWS_REGION")
    with pytest.raises(PlatformError) as none:
        region_for(Platform.from_os(), "edge-01", [node("ap-south-1a", None)])
    assert none.value.field == "--region" and "no stage of this checkout declares edge-01" in str(none.value)
