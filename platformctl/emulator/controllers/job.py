"""The Job controller: ``parallelism`` pods at a time until ``completions`` of them succeeded, or the Job failed.

A pod that failed is judged by the Job's ``podFailurePolicy`` (its rules in order, the first that matches: ``Ignore``
it, ``FailJob``, or ``Count`` it), else counted; more counted than ``backoffLimit`` fails the Job
(``BackoffLimitExceeded``). With a ``podFailurePolicy`` a pod taken away (evicted, deleted) is replaced only once it
has terminated, and judged then: its ``DisruptionTarget`` condition is what an ``Ignore`` rule looks for
(``k8s.io/kubernetes/pkg/controller/job/pod_failure_policy.go``)."""

from __future__ import annotations

from typing import Any

from platformctl.emulator.controllers.host import Controller, ControllerHost
from platformctl.kernel.cluster.model import Pod

CONTROLLER_UID = "batch.kubernetes.io/controller-uid"


def job_labels(uid: str, name: str) -> dict[str, str]:
    """What kube-apiserver adds to a Job's pod template when its selector is its own to make (no ``manualSelector``),
    the new labels and the legacy ones; the selector is ``{CONTROLLER_UID: uid}``
    (``k8s.io/kubernetes/pkg/registry/batch/job/strategy.go``, ``generateSelector``)."""
    return {CONTROLLER_UID: uid, "controller-uid": uid, "batch.kubernetes.io/job-name": name, "job-name": name}


def reconcile(host: ControllerHost, ctrl: Controller) -> None:
    if ctrl.failed_reason:
        return
    while ctrl.active + ctrl.terminating < ctrl.replicas and ctrl.succeeded + ctrl.active < ctrl.completions:
        if host.create_owned_pod(ctrl) is None:  # admission refused it (its FailedCreate said why)
            break
    if ctrl.succeeded >= ctrl.completions and not ctrl.done:
        ctrl.done = True
        ctrl.done_at = host.now()
        _finished(host, ctrl)


def _finished(host: ControllerHost, ctrl: Controller) -> None:
    if ctrl.ttl_seconds is not None:
        host.clock.call_later(ctrl.ttl_seconds, host.delete_controller, ctrl.uid)
    for hook in host.job_done_hooks:  # the CronJob controller prunes its history when a Job of it finishes
        hook(ctrl.uid)


def _matches(rule: dict[str, Any], pod: Pod) -> bool:
    codes = rule.get("onExitCodes")
    if isinstance(codes, dict):
        container = codes.get("containerName")
        if container and container not in {c.name for c in pod.containers}:
            return False
        code = pod.exit_code if pod.exit_code is not None else 137 if pod.disruption_reason else 1
        values = set(codes.get("values") or ())
        return code in values if codes.get("operator") == "In" else code != 0 and code not in values
    wanted = rule.get("onPodConditions") or ()
    held = {"DisruptionTarget"} if pod.disruption_reason else set()
    return any(c.get("type") in held and c.get("status") == "True" for c in wanted if isinstance(c, dict))


def pod_failed(host: ControllerHost, ctrl: Controller, pod: Pod) -> None:
    """A pod of the Job ended without succeeding: ignore it, count it, or fail the Job, as its policy says."""
    if ctrl.failed_reason or ctrl.done:
        return
    rule = next((r for r in ctrl.failure_rules if _matches(r, pod)), None)
    action = rule.get("action") if rule is not None else "Count"
    if action == "Ignore":
        return
    ctrl.failed += 1  # counted, unless ignored (``nonIgnoredFailedPodsCount``)
    if action == "FailJob" and rule is not None:
        index = ctrl.failure_rules.index(rule)
        if "onExitCodes" in rule:
            container = pod.containers[0].name if pod.containers else ""
            said = f"Container {container} for pod {pod.namespace}/{pod.name} failed with exit code {pod.exit_code}"
        else:
            said = f"Pod {pod.namespace}/{pod.name} has condition DisruptionTarget"
        return fail(host, ctrl, "PodFailurePolicy", f"{said} matching FailJob rule at index {index}")
    if ctrl.failed > ctrl.backoff_limit:
        fail(host, ctrl, "BackoffLimitExceeded", "Job has reached the specified backoff limit")


def fail(host: ControllerHost, ctrl: Controller, reason: str, message: str) -> None:
    """The Job failed: its active pods are terminated and it makes no more."""
    ctrl.failed_reason, ctrl.failed_message = reason, message
    ctrl.done, ctrl.done_at = True, host.now()
    for key in list(ctrl.pods):
        pod = host.find_pod(key)
        if pod is not None and pod.deletion_time is None and not pod.is_finished:
            host.terminate_pod(pod)
    _finished(host, ctrl)
