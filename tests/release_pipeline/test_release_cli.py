"""`platformctl release start|status|history|replay|freeze|unfreeze|approve` from an operator's checkout: candidates
named by their content, the ledger's JSON names, and every mistake one line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from platformctl.app.platform import Platform
from platformctl.cli import cli
from platformctl.kernel.state import open_store
from release_pipeline.pipeline import load_pipeline

CHECKOUT = Path(__file__).resolve().parents[2]
LOCK = CHECKOUT / "tests" / "fixtures" / "images.lock.json"


def lock_everywhere(tmp_path: Path) -> Path:
    """The fixture's lock file with every image copied to every stage's region."""
    lock = json.loads(LOCK.read_text())
    for versions in lock["images"].values():
        for regions in versions.values():
            ami = next(iter(regions.values()))
            regions.update({r: ami for r in ("us-west-2", "us-east-2", "us-east-1")})
    path = tmp_path / "images.lock.json"
    path.write_text(json.dumps(lock))
    return path


def trying_out(tmp_path: Path) -> Path:
    """The shipped pipeline file, as someone trying the pipeline out on a ledger on the local disk would write it:
    approvals there allowed, and marked unauthenticated."""
    path = tmp_path / "pipeline.yaml"
    if not path.exists():
        text = (CHECKOUT / "release_pipeline" / "pipeline.yaml").read_text()
        path.write_text(text.replace("../upgrade_service/", f"{CHECKOUT}/upgrade_service/")
                        + "approvers: {unauthenticated: true}\n")
    return path


def release(tmp_path: Path, *args: str) -> Any:
    ledger = str(tmp_path / "ledger.db")
    return CliRunner().invoke(cli, ["release", *args, "--ledger", ledger, "--pipeline", str(trying_out(tmp_path))],
                              catch_exceptions=False)


def test_start_records_one_candidate_per_content_and_status_and_history_name_the_fields(tmp_path: Path) -> None:
    lock = lock_everywhere(tmp_path)
    first = release(tmp_path, "start", "--lock-file", str(lock), "--note", "base 1.4", "-o", "json")
    assert first.exit_code == 0, first.output
    made = json.loads(first.output)
    assert made["new"] and made["id"].startswith("c-") and set(made["stages"]) == {"dev", "staging", "prod-canary", "prod"}
    assert made["stages"]["dev"]["images"]["general"] == {"version": "2.1.0", "id": "ami-0ge0000000000210"}
    # staging pins its images in its stack file; a candidate carries the lock file's to it all the same
    assert made["stages"]["staging"]["images"]["general"] == {"version": "2.1.0", "id": "ami-0ge0000000000210"}
    again = json.loads(release(tmp_path, "start", "--lock-file", str(lock), "--note", "other words", "-o", "json").output)
    assert again["id"] == made["id"] and not again["new"]  # the same content is the same candidate
    status = json.loads(release(tmp_path, "status", "-o", "json").output)
    assert list(status["stages"]) == ["dev", "staging", "prod-canary", "prod"]
    assert all({"current", "last_good", "step", "waiting_for"} <= set(s) for s in status["stages"].values())
    assert status["stages"]["dev"]["ready"] == [made["id"]] and status["candidates"][made["id"]]["status"] == "queued"
    history = json.loads(release(tmp_path, "history", "-o", "json").output)
    assert [e["decision"] for e in history] == ["start"]
    assert {"id", "candidate", "stage", "decision", "at", "reason", "inputs"} <= set(history[0])


def test_freeze_unfreeze_and_approve_are_recorded_with_who(tmp_path: Path) -> None:
    lock = lock_everywhere(tmp_path)
    cid = json.loads(release(tmp_path, "start", "--lock-file", str(lock), "-o", "json").output)["id"]
    frozen = release(tmp_path, "freeze", "--stage", "prod", "--reason", "incident 42", "--until", "4h", "-o", "json")
    assert frozen.exit_code == 0, frozen.output
    assert json.loads(release(tmp_path, "status", "-o", "json").output)["freezes"][0]["reason"] == "incident 42"
    release(tmp_path, "unfreeze", "--stage", "prod")
    assert json.loads(release(tmp_path, "status", "-o", "json").output)["freezes"] == []
    approved = json.loads(release(tmp_path, "approve", cid, "--stage", "dev", "--reason", "ok", "-o", "json").output)
    # no AWS credential resolves here: the local user, marked as no credential's
    assert approved["decision"] == "approve" and approved["by"].endswith("(local)") and "@" in approved["by"]
    # An override applies to the freeze in force when it is given: outside one it is refused, and nothing is written.
    before = json.loads(release(tmp_path, "history", "-o", "json").output)
    outside = release(tmp_path, "approve", cid, "--stage", "dev", "--override-freeze", "the CVE fix")
    assert outside.exit_code == 2 and "no freeze holds dev now" in outside.output, outside.output
    assert json.loads(release(tmp_path, "history", "-o", "json").output) == before
    release(tmp_path, "freeze", "--stage", "dev", "--reason", "incident 43")
    out = release(tmp_path, "approve", cid, "--stage", "dev", "--override-freeze", "the CVE fix", "-o", "json")
    assert json.loads(out.output)["override"]["reason"] == "the CVE fix"
    assert json.loads(out.output)["override"]["inputs"]["covers"][0].startswith("manual@")
    history = json.loads(release(tmp_path, "history", "-o", "json").output)
    assert [e["decision"] for e in history][-2:] == ["approve", "override"] and history[-1]["candidate"] == cid
    empty = release(tmp_path, "approve", cid, "--stage", "dev", "--override-freeze", "")
    assert empty.exit_code == 2 and "--override-freeze: say why" in empty.output
    assert len(json.loads(release(tmp_path, "history", "-o", "json").output)) == len(history)  # nothing written


@pytest.mark.parametrize("args, said", [
    (["approve", "c-000000000000", "--stage", "dev"], "CANDIDATE: no candidate 'c-000000000000'"),
    (["freeze", "--stage", "dev", "--reason", "x", "--until", "2020-01-01T00:00+00:00"], "--until: 2020-01-01T00:00+00:00 is in the past"),
    (["freeze", "--stage", "dev", "--reason", "x", "--until", "tomorrow"], "--until: 'tomorrow' is neither a duration"),
    (["replay", "d-nothing"], "DECISION: no decision 'd-nothing'"),
    (["rollback", "--stage", "staging", "--reason", "bad"], "--stage: the pipeline has deployed nothing to staging"),
    (["rollback", "--stage", "staging", "--reason", " "], "--reason: say why"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, args: list[str], said: str) -> None:
    open_store(str(tmp_path / "ledger.db"))  # an empty ledger, as a pipeline's is before its first release
    out = release(tmp_path, *args)
    assert out.exit_code == 2 and said in out.output and len(out.output.strip().splitlines()) == 1, out.output
    assert json.loads(release(tmp_path, "history", "-o", "json").output) == []


def test_a_malformed_until_or_a_missing_reason_creates_no_ledger(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    for args in (["freeze", "--stage", "dev", "--reason", "x", "--until", "tomorrow"],
                 ["freeze", "--stage", "dev", "--reason", " "], ["rollback", "--stage", "dev", "--reason", " "],
                 ["promote", "c-000000000000", "--stage", "dev", "--reason", " "]):
        out = release(tmp_path, *args)
        assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
        assert not ledger.exists(), args


def test_the_shipped_pipeline_file_refuses_approvals_on_a_ledger_on_the_local_disk(tmp_path: Path) -> None:
    cid = json.loads(release(tmp_path, "start", "--lock-file", str(lock_everywhere(tmp_path)), "-o", "json").output)["id"]
    before = json.loads(release(tmp_path, "history", "-o", "json").output)
    out = CliRunner().invoke(cli, ["release", "approve", cid, "--stage", "dev", "--ledger", str(tmp_path / "ledger.db")])
    assert out.exit_code == 2 and "pipeline.yaml: approvers.unauthenticated: the ledger" in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1
    assert json.loads(release(tmp_path, "history", "-o", "json").output) == before


def test_approving_a_candidate_that_is_not_waiting_there_is_exit_2(tmp_path: Path) -> None:
    cid = json.loads(release(tmp_path, "start", "--lock-file", str(lock_everywhere(tmp_path)), "-o", "json").output)["id"]
    out = release(tmp_path, "approve", cid, "--stage", "prod")
    assert out.exit_code == 2 and f"{cid} is not waiting to enter prod" in out.output


def test_a_lock_file_without_a_stage_region_is_exit_2_naming_it(tmp_path: Path) -> None:
    import shutil

    infra = tmp_path / "infra"
    shutil.copytree(CHECKOUT / "infra", infra, ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "dev-only.lock.json"  # staging pins nothing: it boots what the lock file says
    data = json.loads(LOCK.read_text())
    path.write_text(json.dumps({"images": {name: {v: {r: i for r, i in regions.items() if r == "us-west-2"}
                                                  for v, regions in versions.items()}
                                           for name, versions in data["images"].items()}}))  # dev's region only
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("stages:\n  - name: dev\n  - name: staging\n")
    out = CliRunner().invoke(cli, ["--infra-dir", str(infra), "release", "start", "--lock-file", str(path),
                                   "--pipeline", str(pipeline), "--ledger", str(tmp_path / "l.db")])
    assert out.exit_code == 2 and "us-east-2, the region of stage staging" in out.output, out.output
    assert f"{path}: images.custom" in out.output and not (tmp_path / "l.db").exists()


@pytest.mark.parametrize("text, field", [
    ("stages: []\n", "stages"),
    ("stages:\n  - name: qa\n", "stages[0].name"),
    ("stages:\n  - name: prod\n  - name: dev\n", "stages"),
    ("stages:\n  - name: dev\n    soak: soon\n", "stages[0].soak"),
    ("stages:\n  - name: dev\nfreezes:\n  - {name: f, timezone: Mars/Olympus, cron: '0 1 * * *', duration: 1h}\n", "freezes[0].timezone"),
    ("stages:\n  - name: dev\nfreezes:\n  - {name: f, timezone: UTC, rrule: 'FREQ=SOMETIMES', duration: 1h}\n", "freezes[0].rrule"),
    ("stages:\n  - name: dev\nfreezes:\n  - {name: f, timezone: UTC, cron: '0 1 * * *'}\n", "freezes[0]"),
    ("stages:\n  - name: dev\nonNewer: drop\n", "onNewer"),
    ("stages:\n  - name: dev\n    rotationPolicy: nowhere.yaml\n", "stages[0].rotationPolicy"),
    ("stages:\n  - name: dev\n    judge: nowhere.yaml\n", "stages[0].judge"),
])
def test_a_malformed_pipeline_file_is_one_line_naming_the_field(tmp_path: Path, text: str, field: str) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(text)
    out = CliRunner().invoke(cli, ["release", "status", "--pipeline", str(pipeline), "--ledger", str(tmp_path / "l.db")])
    assert out.exit_code == 2 and f"{pipeline}: {field}" in out.output and len(out.output.strip().splitlines()) == 1, out.output


def test_a_stage_judge_is_read_beside_the_pipeline_file_and_a_mistake_in_it_names_that_file(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("stages:\n  - name: dev\n    judge: judge.yaml\n")
    (tmp_path / "judge.yaml").write_text("minAttempts: 10\n")
    assert load_pipeline(pipeline).judge_path("dev") == tmp_path / "judge.yaml"
    (tmp_path / "judge.yaml").write_text("minAttempts: many\n")
    out = CliRunner().invoke(cli, ["release", "status", "--pipeline", str(pipeline), "--ledger", str(tmp_path / "l.db")])
    assert out.exit_code == 2 and f"{tmp_path / 'judge.yaml'}: minAttempts" in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1 and not (tmp_path / "l.db").exists()


def test_the_shipped_pipeline_file_parses() -> None:
    pipeline = load_pipeline(CHECKOUT / "release_pipeline" / "pipeline.yaml")
    assert pipeline.names == ["dev", "staging", "prod-canary", "prod"] and pipeline.stage("prod").approvals == 1


def test_a_ledger_that_cannot_be_opened_is_one_line_naming_the_ledger(tmp_path: Path) -> None:
    out = CliRunner().invoke(cli, ["release", "status", "--ledger", str(tmp_path / "missing" / "ledger.db")])
    assert out.exit_code == 2 and f"--ledger: no state store at {tmp_path / 'missing' / 'ledger.db'}" in out.output, out.output
    out = CliRunner().invoke(cli, ["release", "freeze", "--stage", "dev", "--reason", "x", "--ledger",
                                   str(tmp_path / "missing" / "ledger.db")])  # a write: the folder is not there
    assert out.exit_code == 2 and "--ledger: no state store at" in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1 and not (tmp_path / "missing").exists()


@pytest.mark.parametrize("args", [["freeze", "--all", "--reason", "year end"], ["unfreeze", "--stage", "prod"], ["tick"],
                                  ["rollback", "--stage", "dev", "--reason", "x"]])
def test_a_mistyped_ledger_is_exit_2_and_no_new_ledger_is_made_for_it(tmp_path: Path, args: list[str]) -> None:
    """A freeze (or a tick) written to a new, empty ledger a typo named would leave the real one unfrozen."""
    typo = tmp_path / "relaese.db"
    out = CliRunner().invoke(cli, ["release", *args, "--ledger", str(typo)])
    assert out.exit_code == 2 and f"--ledger: no state store at {typo}" in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1 and not typo.exists()


def test_a_tick_lease_of_no_time_is_exit_2(tmp_path: Path) -> None:
    out = CliRunner().invoke(cli, ["release", "tick", "--lease-ttl", "0", "--ledger", str(tmp_path / "ledger.db")])
    assert out.exit_code == 2 and "Invalid value for '--lease-ttl'" in out.output, out.output
    assert not (tmp_path / "ledger.db").exists()


def test_a_ledger_in_another_region_is_named_with_its_region_and_a_wrong_query_is_one_line(tmp_path: Path) -> None:
    out = CliRunner().invoke(cli, ["release", "status", "--ledger", "dynamodb://platformctl-release?zone=us-east-1"])
    assert out.exit_code == 2 and "expected dynamodb://TABLE or dynamodb://TABLE?region=REGION" in out.output, out.output
    import boto3
    from moto import mock_aws

    with mock_aws():
        boto3.client("dynamodb", region_name="us-east-1").create_table(
            TableName="platformctl-release", BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "N"}])
        env = {"AWS_REGION": "us-west-2", "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        status = CliRunner(env=env).invoke(cli, ["release", "status", "--ledger", "dynamodb://platformctl-release?region=us-east-1",
                                                 "-o", "json"])
        assert status.exit_code == 0, status.output  # found in us-east-1, though the command's region is us-west-2
        elsewhere = CliRunner(env=env).invoke(cli, ["release", "status", "--ledger", "dynamodb://platformctl-release"])
        assert elsewhere.exit_code == 2 and "in us-west-2" in elsewhere.output, elsewhere.output


def test_an_image_builder_that_booted_a_parent_image_is_no_instance_the_candidate_reached(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`status` counts the instances that booted a candidate's images as nodes: `ami build`'s builder boots the parent
    image to bake its children, and is counted apart (it ran no workload), as EC2's tags tell them."""
    import boto3
    from moto import mock_aws

    from platformctl.app.stage_operations import booted_instances
    from platformctl.kernel.nodegroups import BUILDER_TAG
    from release_pipeline.candidates import Candidate, StageImages

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-west-2")
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]

        def boot(tags: dict[str, str]) -> str:
            spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
            return str(ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, TagSpecifications=spec)
                       ["Instances"][0]["InstanceId"])

        node = boot({"aws:autoscaling:groupName": "dev-usw2a-01-general"})
        builder = boot({"Name": "platformctl-builder-general", BUILDER_TAG: "general"})
        ec2.terminate_instances(InstanceIds=[builder])
        candidate = Candidate("c-1", {"dev": StageImages("dev", "us-west-2", {"base": {"version": "9", "id": image}},
                                                         "1.31", {})}, "rev")
        builders: dict[str, int] = {}
        assert booted_instances(candidate, {"dev": [image]}, Platform.from_os().aws, builders=builders) == {"dev": [node]}
        assert builders == {"dev": 1}


def test_a_tick_whose_stage_meets_a_transient_fault_says_busy_and_exits_0_and_a_permanent_one_exits_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from platformctl.app.stage_operations import StageOperator
    from platformctl.kernel.errors import ApiRefused

    monkeypatch.setenv("PLATFORMCTL_HOME", str(tmp_path / "home"))  # no local region runs here
    fault: list[BaseException] = [TimeoutError("timed out")]

    def unreachable(self: StageOperator, *args: Any, **kwargs: Any) -> Any:
        raise fault[0]  # the stage's account as the deploy step reaches it

    monkeypatch.setattr(StageOperator, "deployed", unreachable)
    monkeypatch.setattr(StageOperator, "deploy", unreachable)
    made = json.loads(release(tmp_path, "start", "--lock-file", str(lock_everywhere(tmp_path)), "-o", "json").output)
    runner = CliRunner()
    tick = ["release", "tick", "--stage", "dev", "--ledger", str(tmp_path / "ledger.db")]
    entered = runner.invoke(cli, tick, catch_exceptions=False)
    assert entered.exit_code == 0, entered.output
    busy = runner.invoke(cli, tick, catch_exceptions=False)
    assert busy.exit_code == 0, busy.output
    assert "busy: stage dev: TimeoutError: timed out" in busy.stderr and "tried again next tick" in busy.stderr
    fault[0] = ApiRefused("forbidden: the tick's role may not update the cluster", 403)
    failing = runner.invoke(cli, [*tick, "-o", "json"], catch_exceptions=False)
    assert failing.exit_code == 1 and "stage dev: ApiRefused: forbidden" in failing.stderr
    assert json.loads(failing.stdout)["failing"] == ["dev"]
    status = json.loads(release(tmp_path, "status", "-o", "json").output)
    assert status["candidates"][made["id"]]["status"] != "halted"
    assert status["stages"]["dev"]["error"]["transient"] is False


def test_a_freeze_by_hand_reaches_the_stages_own_store_at_once_for_its_scheduled_rotation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``release freeze`` writes the stage's ``frozen/<stage>`` record itself (its next tick would too), so the stage's
    CronJob sees it even when no tick runs there; ``unfreeze`` clears it. A duration of no time is refused."""
    from platformctl.kernel.state import open_store
    from platformctl.kernel.state.frozen import frozen_in

    state = tmp_path / "stage-state.db"
    monkeypatch.setenv("PLATFORMCTL_STATE", str(state))  # every stage's own store, here
    release(tmp_path, "start", "--lock-file", str(lock_everywhere(tmp_path)))
    frozen = release(tmp_path, "freeze", "--stage", "prod", "--reason", "incident 42", "-o", "json")
    assert frozen.exit_code == 0, frozen.output
    store = open_store(str(state))
    [held] = frozen_in(store, "prod")
    assert (held.reason, held.until) == ("incident 42", None) and held.by.endswith("(local)")
    assert frozen_in(store, "dev") == []
    assert release(tmp_path, "unfreeze", "--stage", "prod").exit_code == 0
    assert frozen_in(store, "prod") == []
    nothing = release(tmp_path, "freeze", "--stage", "prod", "--reason", "x", "--until", "0s")
    assert nothing.exit_code == 2 and "--until: '0s' is no time" in nothing.output, nothing.output
    assert frozen_in(store, "prod") == []
