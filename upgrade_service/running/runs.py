"""Rotations under their leases: one cluster (``run_cluster``), a stage's clusters step by step (``run_stage``), and
the abort that finishes what a run began (``abort_cluster``): the live run puts back at its next step; a dead run's
lease is waited out, then this puts back itself, fenced by the lease it took."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from platformctl.kernel.clock import parked
from platformctl.kernel.cluster.model import format_time
from platformctl.kernel.state import LeaseHeld, StateStore
from platformctl.kernel.state.lease import LeaseKeeper
from upgrade_service.journal import rotation as j
from upgrade_service.journal.records import AbortedRecord
from upgrade_service.journal.rotation import Journal
from upgrade_service.planning.policy import RotationPolicy
from upgrade_service.running.abort import put_back
from upgrade_service.running.execute import Executor
from upgrade_service.running.run_types import EXIT_DONE, EXIT_HALTED, EXIT_LEASE_HELD, Options, Outcome, Progress, RunStatus, Target


@dataclass
class AbortOutcome:
    cluster: str
    result: str
    held: list[str]  # nodes still cordoned or tainted by the run
    done: bool  # the run is over and nothing is held

    @property
    def exit_code(self) -> int:
        return EXIT_DONE if self.done else EXIT_HALTED

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "result": self.result, "still_held": self.held, "done": self.done,
                "exit_code": self.exit_code}


def abort_cluster(store: StateStore, name: str, connect: Callable[[], Target], holder: str, *, wait: bool = True,
                  lease_ttl: float = 30.0, patience: float = 900.0, poll: float = 0.5,
                  say: Callable[[str], None] | None = None) -> AbortOutcome:
    """Finish the abort of ``name``'s open run (its request already journalled): the run holding the lease puts back at
    its next step; a dead one's lease is waited out (up to ``patience`` wall seconds), then this takes the lease and
    puts back itself, fenced by it. ``wait=False`` says when and by what it will be put back instead of waiting."""
    import time as wall

    stream = j.stream_of(name)
    deadline = wall.monotonic() + patience
    announced = False
    while True:
        state = j.read_state(store, name)
        if not state.open:  # the live run saw the request and put back itself
            ended = state.ended
            held = sorted(ended.still_held) if isinstance(ended, AbortedRecord) else []
            return AbortOutcome(name, (ended.reason if ended else "") or "aborted", held, not held)
        keeper = LeaseKeeper(store, stream, holder, lease_ttl)
        try:
            keeper.acquire()
        except LeaseHeld as taken:
            lease = taken.lease
            held = sorted(state.cordoned | state.tainted)
            until = format_time(lease.expires)
            if not wait:
                return AbortOutcome(name, f"requested: the run holding the lease ({lease.holder}) puts back at its next "
                                    f"step; if it is dead, its lease lapses at {until} and `rotate abort` (again) or the "
                                    f"next `rotate run` puts back", held, False)
            if wall.monotonic() >= deadline:
                return AbortOutcome(name, f"gave up after {patience:.0f} s: the run holding the lease ({lease.holder}) "
                                    "neither put back nor let its lease lapse", held, False)
            if say is not None and not announced:
                say(f"{name}: waiting for the run holding the lease ({lease.holder}) to put back, or for its lease "
                    f"to lapse at {until} if it is dead")
                announced = True
            wall.sleep(poll)
            continue
        try:
            target = connect()
            why, held = put_back(Journal(store, name, target.cluster.clock, keeper), target.cluster, target.groups)
            return AbortOutcome(name, f"{why}; uncordoned and untainted what it held" if not held else
                                f"{why}; still held: {', '.join(held)}", held, not held)
        finally:
            keeper.release()


def run_cluster(target: Target, policy: RotationPolicy, store: StateStore, options: Options, holder: str,
                progress: Callable[[Progress], None] | None = None) -> Outcome:
    """Rotate one cluster under its lease (exit 3 when another run holds it)."""
    keeper = LeaseKeeper(store, j.stream_of(target.name), holder, options.lease_ttl)
    try:
        keeper.acquire()
    except LeaseHeld as held:
        return lease_held(target.name, held)
    try:
        return Executor(target, policy, store, options, keeper, progress).run()
    finally:
        keeper.release()


def lease_held(cluster: str, held: LeaseHeld) -> Outcome:
    lease = held.lease
    return Outcome(cluster, RunStatus.LEASE_HELD, EXIT_LEASE_HELD,
                   f"another rotation of {cluster} is running (lease held by {lease.holder}, good until "
                   f"{_iso(lease.expires)}): not starting a second one")


def _iso(epoch: float) -> str:
    return format_time(epoch)


def run_stage(steps: Sequence[Sequence[Target]], policy: RotationPolicy, store: StateStore, options: Options, holder: str,
              progress: Callable[[Progress], None] | None = None) -> list[Outcome]:
    """Rotate a stage: steps one after another (a zone's member clusters together), stopping after a
    step in which any cluster did not finish. Every cluster's lease is taken first. A Ctrl-C stops every
    cluster at its next safe point (``options.stop``); the leases are given back only once every cluster's
    worker has stopped, however many times Ctrl-C is pressed meanwhile: nothing acts without its lease."""
    stop = options.stop if options.stop is not None else threading.Event()
    options = replace(options, stop=stop)
    keepers: list[LeaseKeeper] = []
    outcomes: list[Outcome] = []
    try:
        for step in steps:
            for target in step:
                keeper = LeaseKeeper(store, j.stream_of(target.name), holder, options.lease_ttl)
                try:
                    keeper.acquire()
                except LeaseHeld as held:
                    return [lease_held(target.name, held)]
                keepers.append(keeper)
        by_name = {k.name: k for k in keepers}
        for step in steps:
            if stop.is_set():
                break
            pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(len(step), 1))
            futures = [pool.submit(Executor(t, policy, store, options, by_name[j.stream_of(t.name)], progress).run)
                       for t in step]
            with parked(step[0].cluster.clock):  # the workers hold the region's time, not this thread
                done = _every_result(futures, stop)
            pool.shutdown(wait=True)
            outcomes += done
            if any(o.status != "done" for o in done):  # the next zone starts only once this one is through
                break
        return outcomes
    finally:
        for keeper in keepers:
            keeper.release()


def _every_result(futures: list[concurrent.futures.Future[Outcome]], stop: threading.Event) -> list[Outcome]:
    """Wait for every worker. A KeyboardInterrupt meanwhile asks them all to stop and goes on waiting: the caller
    releases their leases only once none of them can act any more."""
    while True:
        try:
            return [f.result() for f in futures]
        except KeyboardInterrupt:
            stop.set()
