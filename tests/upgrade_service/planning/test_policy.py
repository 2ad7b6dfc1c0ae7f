"""Rotation policies: what a valid one means, and one clear line for every mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from platformctl.kernel.errors import PlatformError
from upgrade_service.planning.policy import load_policy

EXAMPLE = """\
cluster: prod-use1a-01
poolLabel: eks.amazonaws.com/nodegroup
imageLabel: eks.amazonaws.com/nodegroup-image
targets: {general: ami-0new, ml: ami-0newgpu}
poolOrder: {ml: [general], general: [system]}
strategy: replace
maxInFlight: 20
maxInFlightPerPool: {ml: 2}
zoneAtATime: true
minZoneCapacityPercent: 90
durations: {nodeBootSeconds: {ml: 600, default: 300}, podStartSeconds: 60}
workloadRules:
  - selector: {matchLabels: {app: kvstore}}
    namespaces: [kv]
    mode: one-at-a-time
    settleSeconds: 600
  - selector: {matchExpressions: [{key: workload, operator: In, values: [training]}]}
    mode: wait-for-completion
    maxWaitSeconds: 14400
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path


def test_the_issue_example_parses_with_its_meaning(tmp_path: Path) -> None:
    policy = load_policy(write(tmp_path, EXAMPLE))
    assert policy.targets == {"general": "ami-0new", "ml": "ami-0newgpu"}
    assert policy.boot_seconds("ml") == 600 and policy.boot_seconds("general") == 300
    assert policy.max_in_flight_per_pool == {"ml": 2}
    assert list(policy.pool_graph().edges) == [("general", "ml"), ("system", "general")]
    assert policy.selectors[1].match_expressions[0].values == ("training",)


def test_defaults_keep_capacity_and_go_zone_by_zone(tmp_path: Path) -> None:
    policy = load_policy(write(tmp_path, "targets: {general: ami-1}\n"))
    assert (policy.strategy, policy.zone_at_a_time, policy.min_zone_capacity_percent) == ("surge", True, 90)
    assert policy.pool_label == "eks.amazonaws.com/nodegroup" and policy.boot_seconds("general") == 300


@pytest.mark.parametrize(("text", "message"), [
    ("targets: {general: ami-1}\nmaxInFlght: 3\n", "policy.yaml: maxInFlght: unknown field"),
    ("targets: {general: ami-1}\nmaxInFlight: -1\n", "policy.yaml: maxInFlight: Input should be greater than or equal to 1"),
    ("targets: {general: ami-1}\nmaxInFlightPerPool: {general: 0}\n", "policy.yaml: maxInFlightPerPool.general: Input should be"),
    ("targets: {general: ami-1}\nmaxInFlightPerPool: {gpu: 2}\n",
     "policy.yaml: maxInFlightPerPool.gpu: pool 'gpu' is not one this policy rotates (targets: general)"),
    ("targets: {general: ami-1, ml: ami-2}\npoolOrder: {ml: [general], general: [ml]}\n",
     "policy.yaml: poolOrder: pool order has a cycle: "),
    ("targets: {general: ami-1}\npoolOrder: {general: [general]}\n", "policy.yaml: poolOrder.general: pool 'general' cannot wait for itself"),
    ("targets: {}\n", "policy.yaml: targets: an empty targets rotates nothing"),
    ("healthGate: {command: [gate-check], url: 'http://x'}\n", "policy.yaml: healthGate: give exactly one of canary"),
    ("healthGate: {url: 'ftp://x'}\n", "policy.yaml: healthGate.url: String should match pattern"),
    ("maxMutationsPerMinute: 0\n", "policy.yaml: maxMutationsPerMinute: Input should be greater than or equal to 1"),
    ("drainTimeoutSeconds: -1\n", "policy.yaml: drainTimeoutSeconds: Input should be greater than or equal to 1"),
    ("targets: {general: ami-1}\nstrategy: blue-green\n", "policy.yaml: strategy: Input should be 'replace' or 'surge'"),
    ("targets: {general: ami-1}\nminZoneCapacityPercent: 120\n", "policy.yaml: minZoneCapacityPercent: Input should be less than"),
    ("targets: {general: ami-1}\ndurations: {podStartSeconds: -5}\n", "policy.yaml: durations.podStartSeconds: Input should be greater"),
    ("targets: {general: ami-1}\ndurations: {nodeBootSeconds: {gpu: 5}}\n", "policy.yaml: durations.nodeBootSeconds.gpu: pool 'gpu'"),
    ("targets: {general: ami-1}\nworkloadRules: [{selector: {matchLabels: {app: x}}, mode: one-by-one}]\n",
     "policy.yaml: workloadRules[0].mode: Input should be 'one-at-a-time', 'wait-for-completion' or 'skip'"),
    ("targets: {general: ami-1}\nworkloadRules: [{selector: {matchLabels: {app: x}}, mode: skip, settleSeconds: 5}]\n",
     "policy.yaml: workloadRules[0].settleSeconds: settleSeconds applies to one-at-a-time workloads only"),
    ("targets: {general: ami-1}\nworkloadRules: [{selector: {}, mode: skip}]\n",
     "policy.yaml: workloadRules[0].selector: an empty selector would match every pod"),
    ("targets: {general: ami-1}\nworkloadRules: [{selector: {matchLabel: {app: x}}, mode: skip}]\n",
     "policy.yaml: workloadRules[0].selector.matchLabel: unknown field"),
    ("targets: {general: ami-1}\nworkloadRules: [{selector: {matchExpressions: [{key: a, operator: Near}]}, mode: skip}]\n",
     "policy.yaml: workloadRules[0].selector.matchExpressions[0].operator: operator must be one of"),
    ("targets: [general]\n", "policy.yaml: targets: Input should be a valid dictionary"),
    ("- just a list\n", "policy.yaml: a rotation policy is a mapping of fields"),
    ("targets: {general: ami-1\n", "policy.yaml: not valid YAML (line 2)"),
])
def test_mistakes_name_the_file_and_the_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(PlatformError) as err:
        load_policy(write(tmp_path, text))
    assert str(err.value).replace(str(tmp_path) + "/", "").startswith(message)
    assert "\n" not in str(err.value)


def test_cycle_message_shows_the_cycle(tmp_path: Path) -> None:
    text = "targets: {a: x, b: y, c: z}\npoolOrder: {a: [c], b: [a], c: [b]}\n"
    with pytest.raises(PlatformError, match=r"cycle: (a -> b -> c -> a|b -> c -> a -> b|c -> a -> b -> c)"):
        load_policy(write(tmp_path, text))


def test_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(PlatformError, match="nope.yaml: rotation policy not found"):
        load_policy(tmp_path / "nope.yaml")
