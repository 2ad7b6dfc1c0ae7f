"""The stage model, read from the Pulumi stack files, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from platformctl.kernel.errors import PlatformError
from platformctl.kernel.topology import STAGES, HostCluster, load_stage, parse_stage_file


@pytest.mark.parametrize("name", STAGES)
def test_every_stage_file_loads(name: str) -> None:
    stage = load_stage(name)
    assert stage.name == name and stage.source.endswith(f"infra/Pulumi.{name}.yaml")
    assert isinstance(stage.host_cluster, HostCluster) and len(set(stage.host_cluster.zones)) >= 3
    assert stage.member_clusters
    for member in stage.member_clusters:
        assert member.zone in stage.zones
    names = [c.name for c in stage.clusters()]
    assert len(names) == len(set(names))


def test_prod_spans_three_zones_with_two_member_clusters_each() -> None:
    prod = load_stage("prod")
    per_zone = {z: sum(1 for m in prod.member_clusters if m.zone == z) for z in prod.zones}
    assert len(prod.zones) >= 3 and all(n >= 2 for n in per_zone.values())
    assert {p.node_type for m in prod.member_clusters for p in m.node_pools} == {"system", "general", "ml", "custom"}


def test_smaller_stages_are_smaller() -> None:
    def nodes(stage: str) -> int:
        return sum(p.desired_size for c in load_stage(stage).clusters() for p in c.node_pools)

    assert nodes("dev") < nodes("staging") <= nodes("prod-canary") < nodes("prod")


def _write(tmp_path: Path, mutate) -> Path:  # type: ignore[no-untyped-def]
    doc = yaml.safe_load((Path(load_stage("dev").source)).read_text())
    mutate(doc["config"]["platformctl:topology"])
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("mutate", "field", "message"),
    [
        (lambda t: t["memberClusters"][1].update(zone="us-west-2z"), "memberClusters[1].zone", "'us-west-2z' is not one of the region's zones"),
        (lambda t: t["memberClusters"][1].update(name=t["memberClusters"][0]["name"]), "memberClusters[1].name", "is already used by memberClusters[0]"),
        (lambda t: t["memberClusters"][0]["nodePools"][1].update(minSize=9), "memberClusters[0].nodePools[1].minSize", "minSize 9 is greater than maxSize 8"),
        (lambda t: t["memberClusters"][0]["nodePools"][1].update(minSize=5), "memberClusters[0].nodePools[1].desiredSize", "minSize <= desiredSize <= maxSize"),
        (lambda t: t["memberClusters"][0]["nodePools"][0].update(nodeType="gpu"), "memberClusters[0].nodePools[0].nodeType", "Input should be 'system', 'general', 'ml' or 'custom'"),
        (lambda t: t["memberClusters"][0]["nodePools"][0].pop("maxSize"), "memberClusters[0].nodePools[0].maxSize", "required field is missing"),
        (lambda t: t["memberClusters"][0].update(zones=["us-west-2a"]), "memberClusters[0].zones", "unknown field"),
        (lambda t: t["hostCluster"].update(zones=["us-west-2a", "us-west-2b"]), "hostCluster.zones", "at least 3 items"),
        (lambda t: t["memberClusters"][0]["nodePools"][0].update(instanceTypes=["m9z.huge"]), "memberClusters[0].nodePools[0].instanceTypes[0]", "unknown instance type"),
        (lambda t: t["memberClusters"][0]["nodePools"][2].update(instanceTypes=["m6i.large"]), "memberClusters[0].nodePools[2].instanceTypes[0]", "needs a GPU instance type"),
        (lambda t: t["zones"].append("eu-west-1a"), "zones[3]", "not an availability zone of region us-west-2"),
        (lambda t: t["memberClusters"][0]["nodePools"][1].update(name="system"), "memberClusters[0].nodePools[1].name", "used twice"),
        (lambda t: t["memberClusters"][0]["nodePools"][1].update(desiredSize=-1), "memberClusters[0].nodePools[1].desiredSize", "greater than or equal to 0"),
    ],
)
def test_bad_stage_files_name_the_file_and_the_key(tmp_path: Path, mutate, field: str, message: str) -> None:  # type: ignore[no-untyped-def]
    path = _write(tmp_path, mutate)
    with pytest.raises(PlatformError) as err:
        parse_stage_file(path, "dev")
    assert err.value.file == str(path)
    assert err.value.field == f"config.platformctl:topology.{field}"
    assert message in err.value.detail
    assert "\n" not in str(err.value)


def test_broken_yaml_and_missing_keys(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text("config: [unclosed\n")
    with pytest.raises(PlatformError, match=r"not valid YAML \(line"):
        parse_stage_file(path, "dev")
    path.write_text("config:\n  aws:region: us-west-2\n")
    with pytest.raises(PlatformError) as err:
        parse_stage_file(path, "dev")
    assert err.value.field == "config.platformctl:topology"
    with pytest.raises(PlatformError, match="stack config file not found"):
        parse_stage_file(tmp_path / "Pulumi.nope.yaml", "dev")
    with pytest.raises(PlatformError, match="unknown stage 'qa'"):
        load_stage("qa")
