"""The release ledger: every step and decision of the pipeline, with who, when, why and the decision's inputs, in the
pipeline's store, never pruned; and the pipeline's state, folded from it (``release_pipeline.fold``).

Streams, each written only by whom IAM lets write it (``infra.access.ledger_keys``: a stage's tick writes its own
stage's, never another's nor the people's):

- ``release/candidates``: one record per candidate, keyed by its id (the same content is recorded once), by
  ``release start``;
- the entries, in partitions under **one sequence** (``release/ledger``): ``release/ledger`` itself holds the people's
  (``release start``, ``approve``, ``freeze``, ``promote``, ``rollback``), ``release/ledger@<stage>`` the stage's
  tick's. The store numbers every append of every partition in one order (a transaction moves the sequence's counter
  and puts the entry), so the fold sees a promotion in dev before staging's entry whichever stage's clock is ahead;
  the fold admits a tick's entry only where that tick may decide (``fold.admitted``);
- checkpoints of the folded state with the ledger position they cover, one stream per tick that writes them
  (``release/state@<stage>``): a tick reads its own stage's and what came after it, so its cost does not grow with
  history and no other stage's tick can hand it a forged state; people (``release status``, the dashboard,
  ``approve``) read the last stage's, which its tick writes when it decides and every ``CHECKPOINT_EVERY`` entries;
- ``release/boots@<stage>/<candidate>``: the instances each rotation of the stage saw booting the candidate's images,
  in chunks: neither an entry nor a checkpoint grows with the fleet (``release/boots/<candidate>``, an older
  version's, is read too);
- ``release/deploys/<stage>`` and the stage's lease ``release/tick/<stage>``.

An entry (``Entry``) is ``{"id", "candidate", "stage", "decision", "at", "reason", "inputs", "by"}`` in the store:
``decision`` is a ``Kind``, ``reason`` is for people only (the fold and replay read ``decision`` and ``inputs``, never
the words).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import NamedTuple

from platformctl.kernel.jsontypes import JSONMapping, JSONObject, to_int
from platformctl.kernel.state import Lease, StateStore
from platformctl.kernel.state.lease import LeaseKeeper
from release_pipeline.candidates import Candidate
from release_pipeline.fold import CHECKPOINT_VERSION, Entry, PipelineState, apply, compact, decision_of, entry_id

CANDIDATES, LEDGER, STATE = "release/candidates", "release/ledger", "release/state"
TICK_LEASE = "release/tick"
CHECKPOINT_EVERY = 200  # entries folded past a tick's checkpoint after which it writes one though it decided nothing


def stage_lease(stage: str) -> str:
    """The lease a tick holds while it acts in ``stage``: one per stage, so one stage's rotation never holds another."""
    return f"{TICK_LEASE}/{stage}"


def partition(stage: str | None) -> str:
    """The ledger partition a writer appends to: the stage's tick's, or (None) the people's."""
    return LEDGER if stage is None else f"{LEDGER}@{stage}"


def is_partition(stream: str) -> bool:
    return stream == LEDGER or stream.startswith(LEDGER + "@")


def writer_of(stream: str) -> str | None:
    """The stage whose tick wrote a partition (None: the people's)."""
    return stream.split("@", 1)[1] if "@" in stream else None


def checkpoints(stage: str) -> str:
    """The stream of the checkpoints ``stage``'s tick writes."""
    return f"{STATE}@{stage}"


BOOTS = "release/boots@"  # + stage/candidate id
LEGACY_BOOTS = "release/boots/"  # + candidate id: an older version's, every stage in one stream
BOOT_CHUNK = 2000  # instance ids per boots record: a record stays far below DynamoDB's 400 kB item
DEPLOYS = "release/deploys/"  # + stage: each deploy a tick began (the lock holder it named) and each lock it cleared
DEPLOY_TO_LOCK = 600.0  # seconds: the most a deploy's record may come before the stack lock its update takes


def boots_stream(stage: str, candidate: str) -> str:
    return f"{BOOTS}{stage}/{candidate}"


class Boot(NamedTuple):
    """An instance seen booting an image, as a boots record keeps it (one ``image/instance`` row: the ids alone, so a
    record of 2,000 stays far below an item's limit)."""

    image: str
    instance: str

    @classmethod
    def parse(cls, row: str) -> Boot:
        image, _, instance = row.partition("/")
        return cls(image, instance)

    @property
    def row(self) -> str:
        return f"{self.image}/{self.instance}"


# A stage's lease for the tick: a context that yields whether this tick holds it (and fences the ledger's writes
# with it while it does).
StageLease = Callable[[str], AbstractContextManager[bool]]


class Ledger:
    """The pipeline's store as the pipeline sees it: candidates, entries (fenced by the tick's lease when one is
    held) and the folded state."""

    def __init__(self, store: StateStore, stages: Sequence[str] = ()) -> None:
        self.store = store
        self.stages = tuple(stages)  # the pipeline's, in order: people read the last one's checkpoints
        self.keeper: LeaseKeeper | None = None  # the lease of the stage a tick acts in: every write is fenced by it
        self.acting: str | None = None  # that stage: the tick's entries go to its partition, its checkpoints are read
        self.folded = 0  # entries the last ``state()`` folded past its checkpoint

    @property
    def fence(self) -> Lease | None:
        if self.keeper is None:
            return None
        self.keeper.check()  # a holder that may have lost its lease stops before its next write
        return self.keeper.fence

    def stage_leases(self, holder: str, ttl: float, holders: dict[str, str] | None = None) -> StageLease:
        """A tick's leases, one per stage: ``with leases(stage) as held`` takes the stage's lease (``held`` False when
        another holds it: its holder goes to ``holders``), fences this ledger's writes with it while held, and releases
        it after."""
        from platformctl.kernel.state import LeaseHeld

        @contextmanager
        def hold(stage: str) -> Iterator[bool]:
            keeper = LeaseKeeper(self.store, stage_lease(stage), holder, ttl)
            try:
                keeper.acquire()
            except LeaseHeld as held:
                if holders is not None:
                    holders[stage] = held.lease.holder
                yield False
                return
            self.keeper, self.acting = keeper, stage
            try:
                yield True
            finally:
                self.keeper, self.acting = None, None
                keeper.release()

        return hold

    # ------------------------------------------------------------------ candidates

    def candidate(self, candidate_id: str) -> Candidate | None:
        """The recorded candidate, read newest first: the ones a tick looks up are the recent ones, so the cost does
        not grow with history."""
        before: int | None = None
        limit = 4
        while True:
            page = self.store.read_back(CANDIDATES, before=before, limit=limit)
            for record in page:
                if record.data.get("id") == candidate_id:
                    return Candidate.from_record(record.data)
            if len(page) < limit:
                return None
            before, limit = page[-1].seq, min(limit * 4, 500)

    def recorded(self, ids: Collection[str]) -> dict[str, Candidate]:
        """The recorded candidates among ``ids``, read newest first until every one is found (the state's are the
        recent ones and the ones its stages run: the cost does not grow with history)."""
        wanted, found = set(ids), dict[str, Candidate]()
        before: int | None = None
        while wanted - set(found):
            page = self.store.read_back(CANDIDATES, before=before, limit=100)
            for record in page:
                cid = str(record.data.get("id"))
                if cid in wanted and cid not in found:
                    found[cid] = Candidate.from_record(record.data)
            if len(page) < 100:
                break
            before = page[-1].seq
        return found

    def candidates(self) -> list[Candidate]:
        seen: dict[str, Candidate] = {}
        for r in self.store.read(CANDIDATES):  # two starts of the same content at once may both have written it
            seen.setdefault(str(r.data.get("id")), Candidate.from_record(r.data))
        return list(seen.values())

    def add_candidate(self, candidate: Candidate) -> bool:
        """Record ``candidate``; False when the same content is recorded already (nothing written)."""
        if self.candidate(candidate.id) is not None:
            return False
        self.store.append(CANDIDATES, candidate.to_record(), key=f"candidate/{candidate.id}")
        return True

    # ------------------------------------------------------------------ boots

    def add_boots(self, candidate: str, stage: str, booted: Mapping[str, Sequence[str]],
                  first_light: Mapping[str, Sequence[str]] | None = None) -> int:
        """Record the instances a rotation of ``stage`` saw booting ``candidate``'s images ({image: instance ids}), in
        chunks of their own stream, and which of them its first light booted (one a pool, before any workload moved);
        how many."""
        rows = [Boot(image, i).row for image, ids in sorted(booted.items()) for i in ids]
        stream = boots_stream(stage, candidate)
        for n in range(0, len(rows), BOOT_CHUNK):
            self.store.append(stream, {"stage": stage, "instances": rows[n:n + BOOT_CHUNK]}, fence=self.fence)
        lit = [Boot(image, i).row for image, ids in sorted((first_light or {}).items()) for i in ids]
        for n in range(0, len(lit), BOOT_CHUNK):
            self.store.append(stream, {"stage": stage, "instances": lit[n:n + BOOT_CHUNK], "first_light": True},
                              fence=self.fence)
        return len(set(rows) | set(lit))

    def boots(self, candidate: str) -> dict[str, set[str]]:
        """Per stage, every ``image/instance`` any rotation saw booting ``candidate``'s images."""
        return self.boots_and_first_light(candidate)[0]

    def boots_and_first_light(self, candidate: str) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        """Per stage of the pipeline, every ``image/instance`` any rotation of it saw booting ``candidate``'s images,
        and of those the first-light nodes': each stage's from its own stream (a record naming another stage is passed
        over), and an older version's stream of every stage."""
        every: dict[str, set[str]] = {}
        lit: dict[str, set[str]] = {}
        stages = self.stages or [s.removeprefix(BOOTS).rsplit("/", 1)[0] for s in self.store.streams(BOOTS)
                                 if s.endswith("/" + candidate)]
        streams = [(None, LEGACY_BOOTS + candidate)] + [(s, boots_stream(s, candidate)) for s in stages]
        for stage, stream in streams:
            for r in self.store.read(stream):
                named, rows = str(r.data["stage"]), r.data.get("instances", [])
                if stage is not None and named != stage:
                    continue
                every.setdefault(named, set()).update(rows)
                if r.data.get("first_light"):
                    lit.setdefault(named, set()).update(rows)
        return every, lit

    # ------------------------------------------------------------------ deploys and their stack locks

    def add_deploy(self, stage: str, record: JSONMapping) -> None:
        """A deploy of ``stage`` a tick begins (before ``pulumi up``: ``lock_holder``, the tick's ``lease_holder``,
        ``at``, ``candidate``) or a stack lock it cleared (``cleared``), fenced by the stage's lease."""
        self.store.append(DEPLOYS + stage, dict(record), fence=self.fence)

    def deploys_before_lock(self, stage: str, since: float) -> list[JSONObject]:
        """The deploys of ``stage`` begun in the ``DEPLOY_TO_LOCK`` seconds before a lock taken at ``since`` (a minute
        after it too, for clocks apart), newest first: the ones that may have taken it. Read back from the newest, so
        the read never goes past the lock's own time into older history."""
        found: list[JSONObject] = []
        before: int | None = None
        while True:
            page = self.store.read_back(DEPLOYS + stage, before=before, limit=100)
            for record in page:
                at = float(record.data.get("at") or 0.0)
                if at < since - DEPLOY_TO_LOCK:
                    return found
                if at <= since + 60.0 and "lock_holder" in record.data:
                    found.append(dict(record.data))
            if len(page) < 100:
                return found
            before = page[-1].seq

    # ------------------------------------------------------------------ entries

    def append(self, candidate: str | None, stage: str | None, decision: str, at: float, reason: str,
               inputs: JSONMapping | None = None, by: str = "", salt: str = "", key: str | None = None) -> Entry:
        """Write an entry: a tick's (acting in a stage under its lease) into that stage's partition, fenced by the
        lease; anyone else's into the people's. One sequence numbers both."""
        entry = Entry(key or entry_id(candidate, stage, decision, at, salt), candidate, stage, decision_of(str(decision)),
                      at, reason, dict(inputs or {}), by, self.acting)
        self.store.append(partition(self.acting), entry.to_dict(), fence=self.fence, key=entry.id,  # a retry is not
                          sequence=LEDGER)  # written twice
        return entry

    def partitions(self) -> list[str]:
        """The people's partition and each stage's (the pipeline's stages; without them, the store's registry)."""
        if self.stages:
            return [LEDGER, *map(partition, self.stages)]
        return [LEDGER, *self.store.streams(LEDGER + "@")]

    def entries(self, after: int = 0) -> list[tuple[int, Entry]]:
        """Every entry after the ledger's position ``after``, oldest first, with its position and its writer (a stream
        the sequence names that is no partition of the ledger, which a writer allowed the counter could add, is not
        read)."""
        return [(r.seq, replace(Entry.from_dict(r.data), writer=writer_of(r.stream)))
                for r in self.store.read_sequence(LEDGER, after) if is_partition(r.stream)]

    def newest(self, limit: int) -> list[Entry]:
        """The newest ``limit`` entries, newest first (each partition's newest, merged)."""
        found = [r for p in self.partitions() for r in self.store.read_back(p, limit=limit)]
        found.sort(key=lambda r: r.seq, reverse=True)
        return [replace(Entry.from_dict(r.data), writer=writer_of(r.stream)) for r in found[:limit]]

    def entry(self, entry_id: str) -> Entry | None:
        return next((entry for _, entry in self.entries() if entry.id == entry_id), None)

    # ------------------------------------------------------------------ state

    def trusted(self) -> str | None:
        """The checkpoints this reader folds from: a tick's own stage's, people's the pipeline's last stage's."""
        stage = self.acting or (self.stages[-1] if self.stages else None)
        return checkpoints(stage) if stage is not None else None

    def state(self, trust: str | None = None) -> PipelineState:
        """The last checkpoint of ``trust``'s stream (``trusted()`` when not given) and every entry after it, folded."""
        stream = trust or self.trusted()
        last = self.store.last(stream) if stream is not None else None
        state = PipelineState.from_dict(last.data["state"]) if last is not None and _usable(last.data) else PipelineState()
        self.folded = 0
        for seq, entry in self.entries(after=state.position):
            apply(state, entry)
            state.position = seq
            self.folded += 1
        return state

    def checkpoint(self, state: PipelineState, stages: Sequence[str]) -> None:
        """Write ``state`` as the checkpoint of each of ``stages`` (the ones this tick acted in) that is behind it."""
        for stage in stages:
            last = self.store.last(checkpoints(stage))
            if last is None or not _usable(last.data) or int(last.data["state"]["position"]) < state.position:
                self.store.append(checkpoints(stage), {"version": CHECKPOINT_VERSION, "state": compact(state).to_dict()},
                                  fence=self.fence, key=f"state/{CHECKPOINT_VERSION}/{state.position}")


def _usable(checkpoint: JSONMapping) -> bool:
    """A checkpoint an older version wrote (without a field the fold now keeps) is folded again from the start."""
    return to_int(checkpoint.get("version", 0)) == CHECKPOINT_VERSION


