"""The CronJob controller: a Job at every time the schedule names (croniter), on the cluster's clock.

A firing makes ``<cronjob>-<scheduled time in minutes>`` from ``jobTemplate``, owned by the CronJob, and
records ``lastScheduleTime``; ``concurrencyPolicy`` ``Forbid`` skips a firing while a Job of it is active,
``Replace`` deletes the active ones first; ``suspend`` skips firings; finished Jobs beyond
``successfulJobsHistoryLimit`` (3) are deleted, as the real controller does.
"""

from __future__ import annotations

import copy
from typing import Any

from croniter import croniter

from platformctl.emulator.controllers.objects import Workload, WorkloadStore
from platformctl.emulator.podspec import failure_rules, template_pod
from platformctl.kernel.cluster.apiobjects import invalid
from platformctl.kernel.cluster.model import format_time


class CronJobController:
    def __init__(self, workloads: WorkloadStore) -> None:
        self.w = workloads
        workloads.sim.job_done_hooks.append(self._job_done)

    def _job_done(self, sim_uid: str) -> None:
        for cron in list(self.w.objects["cronjobs"].values()):
            if any(self.w.objects["jobs"].get((cron.namespace, j)) is not None and
                   self.w.objects["jobs"][(cron.namespace, j)].sim_uid == sim_uid for j in cron.jobs):
                self._prune(cron)

    def check(self, obj: dict[str, Any]) -> None:
        spec, name = obj["spec"], obj["metadata"]["name"]
        schedule = spec.get("schedule")
        if not isinstance(schedule, str) or not croniter.is_valid(schedule):
            raise invalid("CronJob", name, "spec.schedule", f"Invalid value: {schedule!r}: not a standard cron schedule", group="batch")
        template = spec.get("jobTemplate")
        if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
            raise invalid("CronJob", name, "spec.jobTemplate.spec", "Required value", "FieldValueRequired", "batch")
        policy = spec.get("concurrencyPolicy", "Allow")
        if policy not in ("Allow", "Forbid", "Replace"):
            raise invalid("CronJob", name, "spec.concurrencyPolicy", f'Unsupported value: {policy!r}: supported values: '
                          '"Allow", "Forbid", "Replace"', "FieldValueNotSupported", "batch")
        # The job template must make a valid Job: checked now, not at the first run.
        template_pod(obj, template["spec"].get("template"), "spec.jobTemplate.spec.template", "CronJob")
        failure_rules(template["spec"], name, "CronJob", "spec.jobTemplate.spec")

    def start(self, cron: Workload) -> None:
        """(Re)arm the next firing after now."""
        if cron.timer is not None:
            cron.timer.cancel()
        due = croniter(cron.obj["spec"]["schedule"], self.w.now()).get_next(float)
        cron.timer = self.w.sim.clock.call_at(due, self._fire, cron, due)

    def _fire(self, cron: Workload, due: float) -> None:
        cron.timer = None
        if self.w.objects["cronjobs"].get((cron.namespace, cron.name)) is not cron:
            return  # deleted
        spec = cron.obj["spec"]
        if not spec.get("suspend"):
            status = cron.obj.setdefault("status", {})
            status["lastScheduleTime"] = format_time(due)
            active = [j for j in cron.jobs if self.w.job_active(cron.namespace, j)]
            policy = spec.get("concurrencyPolicy", "Allow")
            if not (active and policy == "Forbid"):
                if active and policy == "Replace":
                    for running in active:
                        self.w.delete("jobs", cron.namespace, running)
                template = copy.deepcopy(spec["jobTemplate"])
                name = f"{cron.name}-{int(due // 60)}"
                meta = dict(template.get("metadata") or {})
                # the time it was scheduled for, as the CronJob controller stamps each Job it makes (since 1.32)
                meta["annotations"] = {**(meta.get("annotations") or {}),
                                       "batch.kubernetes.io/cronjob-scheduled-timestamp": format_time(due)}
                job = {"metadata": {**meta, "name": name}, "spec": template["spec"]}
                if (cron.namespace, name) not in self.w.objects["jobs"]:
                    self.w.create("jobs", cron.namespace, job, owner=cron)
                    cron.jobs.append(name)
                    self.w.event(cron, "SuccessfulCreate", f"Created job {name}", "cronjob-controller")
            else:
                self.w.event(cron, "JobAlreadyActive", "Not starting job because prior execution is running and "
                             "concurrency policy is Forbid", "cronjob-controller")
            self._prune(cron)
        self.start(cron)

    def _prune(self, cron: Workload) -> None:
        keep = cron.obj["spec"].get("successfulJobsHistoryLimit", 3)  # simulated jobs never fail: only this limit applies
        finished = [j for j in cron.jobs if (cron.namespace, j) in self.w.objects["jobs"] and not self.w.job_active(cron.namespace, j)]
        for job in finished[: max(len(finished) - keep, 0)]:
            self.w.delete("jobs", cron.namespace, job)
            self.w.event(cron, "SuccessfulDelete", f"Deleted job {job}", "cronjob-controller")
        cron.jobs = [j for j in cron.jobs if (cron.namespace, j) in self.w.objects["jobs"]]

    def object(self, cron: Workload) -> dict[str, Any]:
        obj = copy.deepcopy(cron.obj)
        status: dict[str, Any] = dict(obj.get("status") or {})
        cron.jobs = [j for j in cron.jobs if (cron.namespace, j) in self.w.objects["jobs"]]
        active = [j for j in cron.jobs if self.w.job_active(cron.namespace, j)]
        if active:
            status["active"] = [{"kind": "Job", "namespace": cron.namespace, "name": j, "apiVersion": "batch/v1"}
                                for j in active]
        ended = [self.w.sim.workload_status(self.w.objects["jobs"][(cron.namespace, j)].sim_uid or "").get("completed_at")
                 for j in cron.jobs if not self.w.job_active(cron.namespace, j)]
        done: list[float] = [t for t in ended if t is not None]
        if done:
            status["lastSuccessfulTime"] = format_time(max(done))
        obj["status"] = status
        return obj
