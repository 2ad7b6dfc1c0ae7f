"""The shipped pipeline as it ships: `release_pipeline/pipeline.yaml` and the rotation policies it names
(`upgrade_service/examples/dev.yaml`: canary-gated, with first light; `proven.yaml` for the later stages: canary-gated,
first light in its proven mode), the
shipped canaries and judge defaults, its freezes and approvals, on `local up --stage all` of the checkout's stacks
shrunk to two nodes a pool, every cluster's canary runner pod run as the program deploys it.

A good candidate (a new image tree with nothing wrong in it) should pass first light and dev's gate and soak and go on
(to `--to`: `staging`, the stage after the one first light judges in, or `prod`, which takes the shipped soaks, a
weekend freeze when one falls in the way, and an operator's approval in prod-canary and prod, given here as soon as the
candidate waits for it); a bad one (its images fail every container: `local fault bad-image`) should be halted in dev
by first light, with no workload moved. Each run starts its own region, from nothing.

Not part of the test run (a good candidate to `prod` is hours of wall time on two cores; to `staging` minutes).

    .venv/bin/python benchmarks/shipped_pipeline.py [--runs 5] [--candidate good|bad] [--to staging|prod]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ami.manifest import MANIFEST_DIR  # noqa: E402
from platformctl.app import release  # noqa: E402
from platformctl.app.demo.checkout import SPEED, new_tree, shrink_stacks  # noqa: E402
from platformctl.app.demo.narration import Silent  # noqa: E402
from platformctl.app.demo.pipeline import (  # noqa: E402
    _images,
    _Operator,
    _region_clock,
    story_environment,
)
from platformctl.app.platform import Platform  # noqa: E402
from platformctl.kernel import region_client  # noqa: E402
from platformctl.kernel.environment import using  # noqa: E402
from platformctl.kernel.topology import STAGES  # noqa: E402
from release_pipeline.pipeline import load_pipeline  # noqa: E402

PIPELINE = ROOT / "release_pipeline" / "pipeline.yaml"
TICK_SECONDS = 60.0
VIRTUAL_LIMIT = 7 * 86400.0


def one_run(candidate: str, to: str, members: int | None, version: str) -> dict[str, object]:
    home = Path(tempfile.mkdtemp(prefix="platformctl-shipped-"))
    started = time.monotonic()
    environment = story_environment(home)
    with using(environment):
        infra = shrink_stacks(ROOT / "infra", home / "infra", pool_size=2, members=members)
        region, _ = region_client.up(environment, list(STAGES), float(SPEED), infra, workloads=False, canaries=True)
        platform = Platform(environment, infra)
        try:
            region_client.take_part()
            clock = _region_clock(region)
            began = clock.now()
            op = _Operator(platform, Silent())
            # the shipped file, its policies in the checkout, approvals on this local ledger allowed (an operator
            # approves at once below)
            op.pipeline = home / "pipeline.yaml"
            op.pipeline.write_text(PIPELINE.read_text().replace("../upgrade_service/", f"{ROOT}/upgrade_service/")
                                   + "approvers: {unauthenticated: true}\n")
            op.build(new_tree(MANIFEST_DIR, home / f"tree-{version}", version))
            started_candidate = op.start(f"base {version} ({candidate})")
            cid = started_candidate.id
            if candidate == "bad":
                for ami in sorted(set().union(*(_images(started_candidate, s) for s in STAGES))):
                    region_client.faults(home, "POST", {"kind": "bad-image", "image": ami})
            pipeline = load_pipeline(op.pipeline)
            approved: set[str] = set()
            entered: list[str] = []
            done, ticks = False, 0
            while clock.now() - began < VIRTUAL_LIMIT:
                try:
                    release.release_tick(platform, release.TickRequest(op.pipeline, op.ledger), say=lambda m: None)
                except release.EveryStageHeld:
                    pass
                ticks += 1
                status = op.status(aws=False)
                stages = status.stages
                entered = [s for s, st in stages.items() if st.last_good == cid or
                           (st.current == cid and st.step != "waiting")]
                done = stages[to].last_good == cid if to == STAGES[-1] else to in entered  # prod: rotated there
                if status.candidates[cid].status == "halted" or done or (candidate == "bad" and "staging" in entered):
                    break
                for stage, st in stages.items():  # an operator approves what waits for an approval, at once
                    if st.current == cid and st.step == "waiting" and stage not in approved and \
                            pipeline.stage(stage).approvals:
                        release.approve(platform, release.ApproveRequest(cid, stage, "benchmark", op.pipeline, op.ledger))
                        approved.add(stage)
                clock.sleep(TICK_SECONDS)
            halt = next((e for e in op.history() if e["candidate"] == cid and e["decision"] == "halt"), None)
            return {"candidate": cid, "kind": candidate, "halted_in": None if halt is None else halt["stage"],
                    "why": "" if halt is None else str(halt["reason"])[:300],
                    "reached": entered, "done": done, "ticks": ticks, "virtual_hours": round((clock.now() - began) / 3600, 1),
                    "wall_seconds": round(time.monotonic() - started)}
        finally:
            region_client.down(home)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--candidate", choices=("good", "bad"), default="good")
    parser.add_argument("--to", choices=STAGES[1:], default="prod",
                        help="a good candidate's run ends once it enters here (prod: once it is prod's last good)")
    parser.add_argument("--members", type=int, default=1, help="member clusters a stage (0: every one)")
    args = parser.parse_args()
    print(f"{args.candidate} candidates through the shipped pipeline and policies (to {args.to}), {args.runs} runs, "
          f"{args.members or 'every'} member cluster(s) a stage, two nodes a pool:", flush=True)
    outcomes = []
    for i in range(args.runs):
        outcome = one_run(args.candidate, args.to, args.members or None, f"9.{i + 1}.0")
        outcomes.append(outcome)
        print(f"  run {i + 1}: {outcome}", flush=True)
    if args.candidate == "good":
        ok = sum(bool(o["halted_in"] is None and o["done"]) for o in outcomes)
        print(f"good candidates that reached {args.to}: {ok} of {len(outcomes)}")
    else:
        ok = sum(o["halted_in"] == "dev" and "staging" not in o["reached"] for o in outcomes)  # type: ignore[operator]
        print(f"bad candidates halted in dev: {ok} of {len(outcomes)}")


if __name__ == "__main__":
    main()
