"""A pipeline's weeks, at random: the real reconciler and ledger (SQLite) over a fake fleet of four stages, driven by a
seeded random operator, with every invariant of docs/release.md ("What always holds") checked after every step.

One history is ``TICKS`` five-minute ticks of one seed: candidates started at random (about a third bad somewhere,
failing or never conclusive in that stage, some flapping through their soak), rotations that fail, block or are
busy, freezes set and lifted by hand (and the pipeline's own weekend freeze of prod), approvals, rollbacks by hand in
any stage, ticks killed at any of their steps (``failpoints.killed_at``) and an operator's write landing between a
tick's read of the state and its write (the ledger's ``append`` runs it first). ``python -m
tests.release_pipeline.model --histories N`` (``make soak``) runs N seeds on every core and prints any failing seed,
which ``--seed S`` replays alone.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from e2e_canary.verdict import Verdict
from platformctl.kernel import failpoints
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.failpoints import Killed
from platformctl.kernel.jsontypes import JSONMapping
from platformctl.kernel.state.sqlite import SQLiteStore
from release_pipeline.candidates import Candidate, StageImages, make_candidate
from release_pipeline.fold import Entry, PipelineState, StageState, Step, apply
from release_pipeline.ledger import Ledger, checkpoints
from release_pipeline.pipeline import Pipeline, parse_pipeline
from release_pipeline.reconcile import rollback_by_hand, tick
from release_pipeline.replay import replay
from release_pipeline.rotation_result import StageRotation
from release_pipeline.testing import FakeStages

STAGES = ("dev", "staging", "prod-canary", "prod")
TICK = 300.0
TICKS = 800  # about 67 hours a history: a weekend's freeze of prod included
T0 = datetime(2026, 11, 2, 6, 0, tzinfo=UTC).timestamp()  # a Monday morning
ENTRY_LIMIT = 100_000  # bytes: an entry and a checkpoint stay far below DynamoDB's 400 kB item
KILL_POINTS = ("release:enter", "release:deploy", "release:call:deploy", "release:deployed", "release:rotate",
               "release:call:rotate", "release:rotated", "release:blocked", "release:paused", "release:verdict",
               "release:promote", "release:halt", "release:rollback-deploy", "release:call:rollback-deploy",
               "release:rollback-deployed", "release:rollback-rotate", "release:call:rollback-rotate",
               "release:rolled-back", "release:rollback-failed")
INITIAL = "initial"  # what every stage ran before the pipeline's first candidate


def pipeline_of(rng: random.Random) -> Pipeline:
    stage = {"soak": "1h", "minResults": 50, "passFor": "20m", "deadline": "2h"}
    stages: list[dict[str, Any]] = [{"name": s, **stage} for s in STAGES]
    stages[-1]["approvals"] = 1
    weekend = {"name": "weekend", "timezone": "America/New_York", "cron": "0 16 * * 5", "duration": "64h",
               "stages": ["prod"], "reason": "no prod changes over the weekend"}
    document = {"stages": stages, "onNewer": rng.choice(["supersede", "queue"]), "freezes": [weekend]}
    return parse_pipeline(document, "pipeline.yaml", "model")


@dataclass
class Fleet:
    """Four stages' launch templates and nodes, as the one stage fake (``release_pipeline.testing.FakeStages``) keeps
    them, each rotation's and verdict's outcome drawn from the history's random source. Images are named after their
    candidate, so what a stage runs is a candidate's."""

    rng: random.Random
    start: float = T0
    deploys: list[tuple[str, str, bool, int]] = field(default_factory=list)  # (stage, candidate, rollback, ledger seq)
    position: Callable[[], int] = lambda: 0  # the ledger's newest entry: what a side effect came after
    bad: dict[str, tuple[str, str]] = field(default_factory=dict)  # candidate -> (stage, "fail"|"unsure"|"flap")
    hold_asked: int = 0
    kill: str | None = None  # a failpoint armed for the tick under way

    def __post_init__(self) -> None:
        self.stages = FakeStages(self.start, STAGES, rotation_seconds=0.0,
                                 initial=lambda stage: {"general": self.image(stage, INITIAL)},
                                 before_deploy=self._deploying, before_rotate=self._draw, judge=self._judge)

    @property
    def clock(self) -> float:
        return self.stages.clock

    @clock.setter
    def clock(self, at: float) -> None:
        self.stages.clock = at

    def image(self, stage: str, cid: str) -> str:
        return f"ami-{stage}-{cid}"

    def runs(self, stage: str) -> str:
        """The candidate whose images the stage's nodes run."""
        image = self.stages.nodes[stage]["general"]
        prefix = f"ami-{stage}-"
        assert image.startswith(prefix), image
        return image[len(prefix):]

    def _deploying(self, stages: FakeStages, stage: str, candidate: Candidate, rollback: bool) -> None:
        image = candidate.stages[stage].images["general"]["id"]
        prefix = f"ami-{stage}-"
        assert image.startswith(prefix), image
        self.deploys.append((stage, image[len(prefix):], rollback, self.position()))

    def _draw(self, stages: FakeStages, stage: str, candidate: Candidate, rollback: bool,
              hold: Callable[[], str | None] | None) -> StageRotation | None:
        draw = self.rng.random()
        if draw < 0.03:
            return StageRotation("busy", "a rotation of the stage holds its lease")
        if hold is not None and self.rng.random() < 0.5:
            self.hold_asked += 1
            why = hold()
            if why is not None:
                return StageRotation("frozen", why)
        if draw < 0.08:
            return StageRotation("halted", "a node would not drain")
        if draw < 0.14 and not rollback:
            return StageRotation("blocked", "a budget allows no disruption now")
        return None  # finished: the stage's nodes on its templates

    def _judge(self, stages: FakeStages, stage: str, candidate: Candidate, baseline: Candidate | None, since: float,
               window: int, entered: float | None) -> Verdict:
        results = int((self.clock - since) / 3600 * 120)
        where, how = self.bad.get(candidate.id, ("", ""))
        if where != stage:
            return Verdict("pass", "the canaries pass", results_since=results)
        if how == "fail" and self.clock - since > 1200:
            return Verdict("fail", "the canaries fail", results_since=results)
        if how == "flap":
            said = "pass" if int(self.clock / TICK) % 2 else "inconclusive"
            return Verdict(said, f"the canaries say {said}", results_since=results)
        return Verdict("inconclusive", "the canaries cannot tell", results_since=results)


class RacyLedger(Ledger):
    """The ledger, with an operator's write that lands between a tick's read of the state and its next write."""

    def __init__(self, store: SQLiteStore, stages: tuple[str, ...]) -> None:
        super().__init__(store, stages)
        self.between: Callable[[], None] | None = None

    def append(self, candidate: str | None, stage: str | None, decision: str, at: float, reason: str,
               inputs: JSONMapping | None = None, by: str = "", salt: str = "", key: str | None = None) -> Entry:
        if by == "tick" and self.between is not None:
            between, self.between = self.between, None
            between()
        return super().append(candidate, stage, decision, at, reason, inputs, by, salt, key)


class Broken(AssertionError):
    """An invariant broken: which, and the history's seed and step."""


@dataclass
class History:
    seed: int
    folder: Path
    ticks: int = TICKS
    rng: random.Random = field(init=False)
    fleet: Fleet = field(init=False)
    ledger: RacyLedger = field(init=False)  # the ticks'
    people: Ledger = field(init=False)  # the operators': the same store, another writer
    forged: list[str] = field(default_factory=list)  # entries a stage's tick wrote that only others may decide
    refused: set[str] = field(default_factory=set)  # every one of them (none is a decision replay could make again)
    pipeline: Pipeline = field(init=False)
    started: list[str] = field(default_factory=list)
    halted_at: dict[str, int] = field(default_factory=dict)  # candidate -> the ledger entry that halted it
    mirror: PipelineState = field(default_factory=PipelineState)  # the ledger folded entry by entry, here
    checkpoint: int = 0  # the last checkpoint measured
    step: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        # each history begins on another day of the week (the weekend freeze of prod somewhere in most)
        self.fleet = Fleet(random.Random(self.seed * 7919 + 1), T0 + self.rng.randrange(7) * 86400.0)
        self.pipeline = pipeline_of(self.rng)
        self.ledger = RacyLedger(SQLiteStore(self.folder / f"ledger-{self.seed}.db"), self.pipeline.names)
        self.people = Ledger(self.ledger.store, self.pipeline.names)
        self.fleet.position = self._position

    def _position(self) -> int:
        newest = [r.seq for p in self.ledger.partitions() for r in self.ledger.store.read_back(p, limit=1)]
        return max(newest, default=0)

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    # ------------------------------------------------------------------ the operator

    def start(self) -> None:
        n = len(self.started)
        images = [StageImages(s, "us-east-1", {"general": {"version": f"1.{n}.0", "id": self.fleet.image(s, f"c{n}")}},
                              "1.32", {}) for s in STAGES]
        c = make_candidate(images, f"rev{n}", f"change {n}", self.fleet.clock, "ci@example.com")
        c = Candidate(f"c{n}", c.stages, c.infra_revision, c.note, c.created_at, c.created_by)
        draw = self.rng.random()
        if draw < 0.34:
            stage = self.rng.choice(STAGES[:3] + STAGES[:2])  # most bad changes show early
            self.fleet.bad[c.id] = (stage, self.rng.choice(["fail", "fail", "unsure", "flap"]))
        self.people.add_candidate(c)
        self.people.append(c.id, None, "start", self.fleet.clock, c.note, {"ready_in": [STAGES[0]]}, "ci@example.com")
        self.started.append(c.id)
        self.count("started")

    def roll_back(self, name: str) -> None:
        stage = self.people.state().stage(name)
        try:
            cid, target = rollback_by_hand(stage, name)
        except PlatformError:
            return
        self.people.append(cid, name, "halt", self.fleet.clock, "rolled back by hand: a person saw something",
                      {"manual": True, "rollback_to": target, "step": str(stage.step), "pipeline": "model"}, "alice")
        self.count("rollbacks by hand")

    def freeze(self) -> None:
        name = self.rng.choice([None, *STAGES])
        until = self.fleet.clock + self.rng.choice([3600.0, 4 * 3600.0, 24 * 3600.0]) if self.rng.random() < 0.8 else None
        self.people.append(None, name, "freeze", self.fleet.clock, "a freeze by hand", {"until": until}, "bob")
        self.count("freezes")

    def unfreeze(self) -> None:
        self.people.append(None, self.rng.choice([None, *STAGES]), "unfreeze", self.fleet.clock, "lifted", {},
                      "bob")

    def approve(self) -> None:
        prod = self.people.state().stage("prod")
        waiting = [c for c in ([prod.current] if prod.step == Step.WAITING else []) + prod.ready if c]
        if waiting:
            cid = self.rng.choice(waiting)
            self.people.append(cid, "prod", "approve", self.fleet.clock, "looks fine", {},
                          self.rng.choice(["carol", "dave"]), salt=str(self.step))

    def operator(self) -> None:
        """What people do during one tick's five minutes."""
        if self.rng.random() < 1 / 18:
            self.start()
        if self.rng.random() < 0.01:
            self.roll_back(self.rng.choice(STAGES))
        if self.rng.random() < 0.004:
            self.freeze()
        if self.rng.random() < 0.01:
            self.unfreeze()
        if self.rng.random() < 0.2:
            self.approve()
        if self.rng.random() < 0.02:
            self.forge()

    def forge(self) -> None:
        """A stage's tick that writes into its own partition (all IAM lets it write) what only people decide, or
        another stage's step, or a halt of what is not in flight there: the fold must pass over each."""
        name = self.rng.choice(STAGES[:-1])
        tick = Ledger(self.ledger.store, self.pipeline.names)
        tick.acting = name  # as its lease would (its partition), unfenced: the forgery is the point
        state = self.people.state()
        prod = state.stage("prod")
        someone = self.rng.choice(self.started) if self.started else "c0"
        choice = self.rng.randrange(5)
        if choice == 0:
            entry = tick.append(prod.current or someone, "prod", "approve", self.fleet.clock, "forged", {}, "tick")
        elif choice == 1:
            entry = tick.append(None, None, "freeze", self.fleet.clock, "forged", {"until": None}, "tick")
        elif choice == 2:
            entry = tick.append(prod.current or someone, "prod", "promote", self.fleet.clock, "forged", {"ready_in": []},
                                "tick")
        elif choice == 3:
            other = [c for c in self.started if c != state.stage(name).current] or ["c-none"]
            entry = tick.append(self.rng.choice(other), name, "halt", self.fleet.clock, "forged",
                                {"rollback_to": None}, "tick")
        else:
            entry = tick.append(someone, "prod", "force", self.fleet.clock, "forged", {}, "tick")
        self.forged.append(entry.id)
        self.refused.add(entry.id)
        self.count("forgeries")

    def racing(self) -> Callable[[], None]:
        """An operator's write for the moment between a tick's read and its write."""
        choice = self.rng.random()
        if choice < 0.6:
            return lambda: self.roll_back(self.rng.choice(STAGES))
        if choice < 0.8:
            return self.freeze
        return self.approve

    # ------------------------------------------------------------------ the run

    def run(self) -> History:
        leases = self.ledger.stage_leases("tick", 3600.0)  # each stage's entries in its own partition
        for step in range(self.ticks):
            self.step = step
            self.operator()
            self.check("after the operator")
            if self.rng.random() < 0.08:
                self.ledger.between = self.racing()
                self.count("writes between a read and a write")
            kill = self.rng.choice(KILL_POINTS) if self.rng.random() < 0.15 else None
            try:
                if kill is not None:
                    with failpoints.killed_at(kill):
                        tick(self.pipeline, self.ledger, self.fleet.stages, "tick", lease=leases)
                else:
                    tick(self.pipeline, self.ledger, self.fleet.stages, "tick", lease=leases)
            except Killed:
                self.count("ticks killed")
            self.ledger.between = None
            self.check("after the tick")
            self.fleet.clock += TICK
        self.check_replays()
        self.check_checkpoint()
        for where in self.ledger.state().candidates.values():
            self.count(where.status)
        self.count("halts")  # at least one key, so a history is never silent
        self.counts["halts"] = len(self.halted_at)
        return self

    # ------------------------------------------------------------------ the invariants

    def broken(self, what: str) -> Broken:
        return Broken(f"seed {self.seed}, tick {self.step}: {what}")

    def check(self, when: str) -> None:
        """Every invariant, on the ledger folded entry by entry here (the tick's checkpoints are compared with it at the
        end): what the state says, what the fleet runs, how big the records are."""
        for seq, entry in self.ledger.entries(after=self.mirror.position):
            size = len(json.dumps(entry.to_dict()))
            if size > ENTRY_LIMIT:
                raise self.broken(f"{when}: a {entry.decision} entry is {size} bytes")
            apply(self.mirror, entry)
            self.mirror.position = seq
            if entry.candidate in self.mirror.candidates and self.mirror.candidates[entry.candidate].status == "halted":
                self.halted_at.setdefault(entry.candidate, seq)
        if any(f not in self.mirror.refused for f in self.forged):
            raise self.broken(f"{when}: a tick's forged entry was admitted: {self.forged} vs {self.mirror.refused}")
        self.forged = []
        self._check_state(self.mirror, when)
        self._check_fleet(self.mirror, when)
        last = self.ledger.store.last(checkpoints("prod")) if when == "after the tick" else None
        if last is not None and last.seq != self.checkpoint:
            self.checkpoint = last.seq
            if len(json.dumps(last.data)) > ENTRY_LIMIT:
                raise self.broken(f"{when}: the checkpoint is {len(json.dumps(last.data))} bytes")

    def _check_state(self, state: PipelineState, when: str) -> None:
        halted = {c for c, v in state.candidates.items() if v.status == "halted"}
        for name, stage in state.stages.items():
            if stage.last_good in halted:
                raise self.broken(f"{when}: {name}'s last good candidate {stage.last_good} is halted")
            if set(stage.ready) & halted:
                raise self.broken(f"{when}: {name} holds halted candidates ready: {sorted(set(stage.ready) & halted)}")
            if stage.step in (Step.WAITING, Step.DEPLOYING, Step.ROTATING, Step.SOAKING) and stage.current in halted:
                raise self.broken(f"{when}: {name} is {stage.step} with the halted candidate {stage.current}")
            if stage.step == Step.ROLLING_BACK and stage.rollback_to is not None:
                if stage.rollback_to in halted:
                    raise self.broken(f"{when}: {name} rolls back to the halted candidate {stage.rollback_to}")
                if stage.rollback_to not in stage.good:
                    raise self.broken(f"{when}: {name} rolls back to {stage.rollback_to}, which never passed it")

    def _check_fleet(self, state: PipelineState, when: str) -> None:
        order = {c: n for n, c in enumerate(self.started)}
        for name in STAGES:
            stage = state.stages.get(name) or StageState()  # (read without adding it: the checkpoint is compared)
            runs = self.fleet.runs(name)
            if stage.step == Step.IDLE and stage.intent is None:
                expected = stage.last_good
                if expected is not None and runs != expected:
                    raise self.broken(f"{when}: {name} is idle on {runs}, its last good is {expected}")
                if runs in self.halted_at:
                    raise self.broken(f"{when}: {name} is idle on the halted candidate {runs}")
        entered: dict[str, int] = {}
        for name, cid, rollback, at in self.fleet.deploys:
            if cid == INITIAL:
                continue
            if cid in self.halted_at and at >= self.halted_at[cid]:
                raise self.broken(f"{when}: {cid} was deployed to {name} after its halt"
                                  + (" (as a rollback's target)" if rollback else ""))
            if not rollback:
                if order[cid] < entered.get(name, -1):
                    raise self.broken(f"{when}: {name} took {cid} after a newer candidate")
                entered[name] = order[cid]

    def check_checkpoint(self) -> None:
        """The tick's state (its last checkpoint and what came after) is the ledger folded from the start, but for the
        finished candidates a checkpoint leaves out."""
        folded, mirror = self.ledger.state().to_dict(), self.mirror.to_dict()
        kept = set(folded["candidates"])
        mirror["candidates"] = {c: v for c, v in mirror["candidates"].items() if c in kept}
        mirror["approvals"] = {k: v for k, v in mirror["approvals"].items() if k in folded["approvals"]}
        if folded != mirror:
            raise self.broken("the checkpointed state is not the ledger folded from the start")

    def check_replays(self) -> None:
        for _, entry in self.ledger.entries():
            if entry.decision in ("wait", "enter", "soak", "promote", "halt") and not entry.inputs.get("manual") and \
                    entry.id not in self.refused:
                again = replay(entry)
                if not again["same"]:
                    raise self.broken(f"{entry.decision} of {entry.candidate} in {entry.stage} replays differently: {again}")


def run_one(seed: int, ticks: int = TICKS) -> dict[str, int]:
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as folder:
        return History(seed, Path(folder), ticks).run().counts


def _worker(seed: int) -> tuple[int, str | None]:
    try:
        run_one(seed)
    except Broken as exc:
        return seed, str(exc)
    except Exception as exc:
        return seed, f"seed {seed}: {type(exc).__name__}: {exc}"
    return seed, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--histories", type=int, default=1000)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--seed", type=int, help="replay one seed and print what it did")
    parser.add_argument("--jobs", type=int, default=0, help="processes (default: every core)")
    args = parser.parse_args(argv)
    if args.seed is not None:
        print(json.dumps(run_one(args.seed)))
        return 0
    import multiprocessing
    import os

    began = time.monotonic()
    failed: list[str] = []
    with multiprocessing.Pool(args.jobs or os.cpu_count() or 1) as pool:
        seeds = range(args.first_seed, args.first_seed + args.histories)
        for done, (_seed, why) in enumerate(pool.imap_unordered(_worker, seeds, chunksize=4), 1):
            if why is not None:
                failed.append(why)
                print(f"FAILED {why}", flush=True)
            if done % 100 == 0:
                print(f"{done} histories, {len(failed)} failed, {time.monotonic() - began:.0f} s", flush=True)
    print(f"{args.histories} histories of {TICKS} ticks, {len(failed)} failed, {time.monotonic() - began:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
