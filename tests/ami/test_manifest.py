"""Image manifests: inheritance by the documented merge rules, provenance, and one clear line per mistake."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ami.manifest import MANIFEST_DIR, Replace, load_manifests, merge, origin_of
from platformctl.cli import cli
from platformctl.kernel.errors import PlatformError


def test_the_shipped_tree_resolves_parents_first() -> None:
    manifests = load_manifests()
    assert manifests.order() == ["base", "general", "custom", "ml"]
    assert manifests.generations() == [["base"], ["general", "ml"], ["custom"]]
    custom = manifests.get("custom")
    assert custom.config["architecture"] == "x86_64" and custom.config["kubernetesVersion"] == "1.32"
    assert custom.config["packages"][-1] == "numactl" and "nfs-utils" not in custom.config["packages"]  # !replace
    assert custom.config["sysctls"]["net.core.somaxconn"] == 32768  # from general
    assert custom.config["sysctls"]["vm.swappiness"] == 0  # its own
    assert [s["name"] for s in custom.config["scripts"]] == ["cis-hardening", "pull-pause-image"]  # lists append
    assert origin_of(custom, "sysctls.vm.max_map_count") == "base.yaml"
    assert origin_of(custom, "packages") == "custom.yaml"
    assert origin_of(custom, "scripts") == "base.yaml + general.yaml"
    assert manifests.get("ml").config["sysctls"]["vm.max_map_count"] == 1048576  # the child's scalar wins


def test_merge_rules() -> None:
    origin: dict[str, str] = {}
    parent = {"a": {"x": 1, "y": [1, 2]}, "l": ["p"], "s": "parent", "r": {"keep": 1}}
    child = {"a": {"y": [2, 3], "z": 4}, "l": ["c", "p"], "s": "child", "r": Replace({"only": 2})}
    merged = merge(parent, child, origin, "", "child.yaml")
    assert merged == {"a": {"x": 1, "y": [1, 2, 3], "z": 4}, "l": ["p", "c"], "s": "child", "r": {"only": 2}}
    assert origin["r.only"] == "child.yaml" and origin["s"] == "child.yaml"


def copy_tree(tmp_path: Path) -> Path:
    folder = tmp_path / "manifests"
    shutil.copytree(MANIFEST_DIR, folder)
    return folder


def test_content_hash_follows_the_resolved_content(tmp_path: Path) -> None:
    folder = copy_tree(tmp_path)
    before = {n: i.content_hash for n, i in load_manifests(folder).images.items()}
    (folder / "ml.yaml").write_text("# a comment changes nothing\n" + (folder / "ml.yaml").read_text())
    assert {n: i.content_hash for n, i in load_manifests(folder).images.items()} == before
    base = folder / "base.yaml"
    base.write_text(base.read_text().replace("vm.max_map_count: 262144", "vm.max_map_count: 524288"))
    after = {n: i.content_hash for n, i in load_manifests(folder).images.items()}
    assert after["base"] != before["base"] and after["general"] != before["general"]  # general inherits it
    assert after["ml"] == before["ml"]  # ml sets its own vm.max_map_count: its resolved content is the same


@pytest.mark.parametrize(("file", "edit", "message"), [
    ("ml.yaml", ("parent: base", "parent: bse"), "ml.yaml: parent: unknown parent 'bse'"),
    ("base.yaml", ("source:\n  ssmParameter: /aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/recommended/image_id",
                   "parent: custom"), ": parent: inheritance cycle: "),
    ("ml.yaml", ("parent: base", "parent: base\nsource: {ami: ami-0123456789abcdef0}"),
     "ml.yaml: an image has either a parent or a source, not both"),
    ("ml.yaml", ("version: 3.0.2", "version: 3.0"),
     "ml.yaml: version: must be a semantic version, MAJOR.MINOR.PATCH like 1.4.0 (quote it in YAML) (got 3.0)"),
    ("ml.yaml", ("version: 3.0.2", "version: v3"), "ml.yaml: version: must be a semantic version"),
    ("ml.yaml", ("packages:", "pakages:"), "ml.yaml: pakages: unknown field"),
    ("ml.yaml", ("family: ml", "family: gpu"), "ml.yaml: family: Input should be 'general', 'ml' or 'custom'"),
    ("ml.yaml", ("name: ml", "name: ml2"), "ml.yaml: name: name 'ml2' must match the file name (ml.yaml)"),
    ("base.yaml", ("architecture: x86_64\n", ""), "base.yaml: architecture: required for an image without a parent"),
    ("ml.yaml", ("family: ml", "family: !replace ml"), "ml.yaml: family: !replace applies to inherited configuration only"),
    ("ml.yaml", ("services: {", "services: {sshd: on, "), "ml.yaml: services.sshd: Input should be 'enabled' or 'disabled'"),
])
def test_bad_manifests_name_the_file_and_key(tmp_path: Path, file: str, edit: tuple[str, str], message: str) -> None:
    folder = copy_tree(tmp_path)
    path = folder / file
    text = path.read_text()
    assert edit[0] in text
    path.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(PlatformError) as err:
        load_manifests(folder)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_bad_manifest_stops_a_build_before_any_aws_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = copy_tree(tmp_path)
    (folder / "ml.yaml").write_text((folder / "ml.yaml").read_text().replace("parent: base", "parent: nope"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # any AWS call would fail differently
    result = CliRunner().invoke(cli, ["ami", "build", "--manifests", str(folder), "--lock-file", str(tmp_path / "l.json")])
    assert result.exit_code == 2 and "ml.yaml: parent: unknown parent 'nope'" in result.stderr
    assert not (tmp_path / "l.json").exists()


def test_resolve_and_graph_commands() -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["ami", "resolve", "custom", "-o", "json"])
    assert result.exit_code == 0 and '"parent": "general"' in result.stdout
    text = runner.invoke(cli, ["ami", "resolve", "custom"]).stdout
    assert "base.yaml + general.yaml" in text
    graph = runner.invoke(cli, ["ami", "graph"]).stdout
    assert graph.index("base") < graph.index("general") < graph.index("custom")
    missing = runner.invoke(cli, ["ami", "resolve", "nope"])
    assert missing.exit_code == 2 and "no image manifest named 'nope'" in missing.stderr
