"""What a workload object's spec says of its pods, read as the API server reads it.

``template_pod`` turns a workload's ``spec.template`` into the ``Pod`` its controller stamps out,
``selector_of`` checks the ``spec.selector`` against the template's labels, ``int_field`` reads a
non-negative integer field (``replicas``, ``parallelism`` …); each refuses what the API refuses, as
``ApiError`` 422. ``annotation_seconds`` reads a pod's simulator knobs (``sim.platformctl.io/start-seconds``,
``run-seconds``) and ``annotation_code`` its ``exit-code``. Shared by the workload objects (``platformctl.emulator.workloads``), their controllers and
the simulator; it imports none of them.
"""

from __future__ import annotations

import json
from typing import Any

from platformctl.kernel.cluster.apiobjects import invalid, platform_invalid
from platformctl.kernel.cluster.model import ANNOTATION_EXIT_CODE, Pod, parse_pod
from platformctl.kernel.cluster.selectors import LabelSelector
from platformctl.kernel.errors import PlatformError

DEFAULT_START_SECONDS = 10.0  # scheduled to Ready, unless the pod's start-seconds annotation says otherwise
DEFAULT_RUN_SECONDS = 900.0  # a Job pod's run time, unless its run-seconds annotation says otherwise


def selector_of(spec: dict[str, Any], kind: str, name: str, template_labels: dict[str, str], group: str) -> LabelSelector:
    raw = spec.get("selector")
    if raw is None:
        raise invalid(kind, name, "spec.selector", "Required value", "FieldValueRequired", group)
    try:
        selector = LabelSelector.parse(raw, "spec.selector", None)
    except PlatformError as exc:
        raise platform_invalid(exc, kind, name) from None
    if selector is None or not selector.matches(template_labels):
        shown = "map[string]string{" + ", ".join(f"{json.dumps(str(k))}:{json.dumps(str(v))}"
                                                 for k, v in sorted(template_labels.items())) + "}"  # Go's %#v
        raise invalid(kind, name, "spec.template.metadata.labels", f"Invalid value: {shown}: "
                      "`selector` does not match template `labels`", group=group)
    return selector


def template_pod(obj: dict[str, Any], template: Any, where: str, kind: str) -> Pod:
    meta = obj["metadata"]
    if not isinstance(template, dict):
        raise invalid(kind, meta["name"], where, "Required value", "FieldValueRequired")
    tmeta = template.get("metadata") or {}
    raw = {"metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": tmeta.get("labels"),
                        "annotations": tmeta.get("annotations")},
           "spec": template.get("spec")}
    try:
        return parse_pod(raw, where)
    except PlatformError as exc:
        raise platform_invalid(exc, kind, meta["name"]) from None


def int_field(spec: dict[str, Any], key: str, default: int, kind: str, name: str) -> int:
    value = spec.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid(kind, name, f"spec.{key}", f"Invalid value: {value!r}: must be greater than or equal to 0")
    return value


def annotation_seconds(pod: Pod, key: str, default: float) -> float:
    """A duration the pod's annotation ``key`` gives (never negative), else ``default``."""
    raw = pod.annotations.get(key)
    if raw is None:
        return default
    try:
        return max(float(raw), 0.0)
    except ValueError:
        return default


def annotation_code(pod: Pod) -> int:
    """The exit code a Job pod ends with once it has run: its ``sim.platformctl.io/exit-code`` annotation, else 0."""
    try:
        return int(pod.annotations.get(ANNOTATION_EXIT_CODE, "0"))
    except ValueError:
        return 0


def failure_rules(spec: dict[str, Any], name: str, kind: str = "Job", path: str = "spec") -> tuple[dict[str, Any], ...]:
    """A Job's ``podFailurePolicy`` rules (``spec`` at ``path`` of a ``kind``), checked as the API server checks them.
    A Job's pod-condition pattern without a ``status`` is defaulted to ``True``; a CronJob's job template's is not
    (kube-apiserver 1.32 refuses the CronJob: its defaulting does not reach into the template)."""
    policy = spec.get("podFailurePolicy")
    if policy is None:
        return ()
    rules = policy.get("rules") if isinstance(policy, dict) else None
    if not isinstance(rules, list):
        raise invalid(kind, name, f"{path}.podFailurePolicy.rules", "Required value", "FieldValueRequired", "batch")
    for i, rule in enumerate(rules):
        where = f"{path}.podFailurePolicy.rules[{i}]"
        if not isinstance(rule, dict) or rule.get("action") not in ("FailJob", "FailIndex", "Ignore", "Count"):
            raise invalid(kind, name, f"{where}.action", 'Unsupported value: supported values: "Count", "FailIndex", '
                          '"FailJob", "Ignore"', "FieldValueNotSupported", "batch")
        codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions")
        if (codes is None) == (conditions is None):
            raise invalid(kind, name, where, "Invalid value: specifying one of onExitCodes and onPodConditions is required",
                          group="batch")
        if codes is not None and (not isinstance(codes, dict) or codes.get("operator") not in ("In", "NotIn")
                                  or not isinstance(codes.get("values"), list)):
            raise invalid(kind, name, f"{where}.onExitCodes", 'Invalid value: an operator ("In" or "NotIn") and values '
                          "are required", group="batch")
        for j, pattern in enumerate(conditions if isinstance(conditions, list) else ()):
            if isinstance(pattern, dict) and not pattern.get("status") and kind == "Job":
                pattern["status"] = "True"
            status = pattern.get("status") if isinstance(pattern, dict) else None
            if status not in ("True", "False", "Unknown"):
                raise invalid(kind, name, f"{where}.onPodConditions[{j}].status",
                              'Required value: valid values: ["False" "True" "Unknown"]' if not status else
                              f'Unsupported value: "{status}": supported values: "False", "True", "Unknown"',
                              "FieldValueRequired" if not status else "FieldValueNotSupported", "batch")
    return tuple(rules)
