"""A/A of the whole release: a good candidate through all four stages with the shipped soaks, several times, on a
loaded machine. Every run should promote it to ``prod``; a halt is a false alarm of the soak's verdict or the gate.

Each run starts the local region of every stage afresh (``local up --stage all``, the checkout's stacks shrunk to one
member cluster a stage and one node a pool, every stage's canary runner), builds a new image tree with nothing wrong
in it, starts it as a candidate and ticks the pipeline once a virtual minute (as ``demo-pipeline`` does) with the
shipped ``release_pipeline/pipeline.yaml``'s soaks, result counts, ``passFor`` and deadlines (1 h, 4 h, 24 h: 29 hours of soak), its freezes
and approvals left out (a benchmark has nobody to approve and would wait out a weekend), the demo's rotation policy
and judge (made for one node a pool). Beside it, ``--burn`` processes spin on the CPU, as other work would.

Not part of the test run.

    .venv/bin/python benchmarks/release_aa.py [--runs 5] [--burn 1] [--no-skip]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ami.manifest import MANIFEST_DIR  # noqa: E402
from platformctl.app.demo.narration import Silent  # noqa: E402
from platformctl.app.demo.pipeline import release_one  # noqa: E402


def shipped_soaks() -> str:
    """The shipped pipeline with its soaks, result counts and deadlines; the demo's policy and judge; no freezes, no
    approvals."""
    pipeline = yaml.safe_load((ROOT / "release_pipeline" / "pipeline.yaml").read_text())
    for stage in pipeline["stages"]:
        stage.update({"rotationPolicy": "rotation.yaml", "judge": "judge.yaml"})
        stage.pop("approvals", None)
    pipeline.pop("freezes", None)
    return str(yaml.safe_dump(pipeline, sort_keys=False))


def burn() -> None:
    while True:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--burn", type=int, default=1, help="processes spinning on the CPU beside each run")
    parser.add_argument("--skip", action=argparse.BooleanOptionalAction, default=True, help="the region's time skips")
    args = parser.parse_args()
    pipeline = shipped_soaks()
    burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(args.burn)]
    for b in burners:
        b.start()
    print(f"a good candidate through dev, staging, prod-canary and prod with the shipped soaks, {args.runs} runs, "
          f"{args.burn} CPU burner(s) beside, skipping {'on' if args.skip else 'off'}:", flush=True)
    promoted = 0
    try:
        for run in range(1, args.runs + 1):
            out = release_one(ROOT / "infra", MANIFEST_DIR, pipeline, Silent(), skip=args.skip, version=f"9.{run}.0")
            promoted += out.promoted
            said = "promoted to prod" if out.promoted else f"HALTED in {out.halted_in}: {out.why[:300]}"
            print(f"  run {run}: {said}; {out.ticks} ticks over {out.virtual_hours:.1f} virtual hours in "
                  f"{out.wall_seconds:.0f} s of wall time", flush=True)
    finally:
        for b in burners:
            b.terminate()
    print(f"  {promoted} of {args.runs} promoted (an A/A run should promote every time)")


if __name__ == "__main__":
    main()
