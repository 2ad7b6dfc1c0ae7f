"""Benchmark: the peak memory of `rotate plan --context` against a 3,000-node, ~120,000-pod cluster over HTTP.

The synthetic cluster is served by the local region's own Kubernetes API (``platformctl.emulator.server.kubeapi``,
the server `local up` runs) on a 127.0.0.1 port, and each command runs as a process of its own, as a rotation Job's
container runs it; its peak resident memory is the kernel's (``wait4``'s ``ru_maxrss``). Measured side by side in one
run against the same cluster:

- the command's start alone (``rotate plan --help``: the interpreter and the toolkit's imports);
- ``rotate plan --context`` as shipped: every list read 500 items a page, each page parsed before the next;
- the same command with the pages made larger than the cluster (one answer for each list, the whole JSON held and
  parsed at once, as the toolkit read lists before it paged them);
- the snapshot's size (``kubectl get nodes,pods,pdb -A -o json``'s bytes) and the memory limit the Pulumi program gives
  the rotation Job (``infra/components/kubernetes.py``).

Not part of the test run.

    .venv/bin/python benchmarks/live_memory.py [--nodes 3000] [--pods-per-node 40]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from werkzeug.serving import make_server

from infra.components.kubernetes import JOB_MEMORY_LIMIT
from platformctl.emulator.server.kubeapi import KubeAPI
from platformctl.emulator.server.objects import ClusterState
from platformctl.emulator.server.process import kubeconfig
from platformctl.emulator.synthetic import POOL_SHAPES, synthetic_cluster

NEW_IMAGE = "ami-0b2e00c0ffee00099"
JOB_LIMIT_MIB = int(JOB_MEMORY_LIMIT.removesuffix("Mi"))  # the rotation Job's memory limit in the Pulumi program
# Each command reports its own high-water mark (``VmHWM``, of its own address space, which exec starts afresh; the
# ``ru_maxrss`` wait4 returns also counts what the child held before exec, a copy of this large process).
RUN = ("import atexit, sys\n"
       "out = sys.argv.pop(1)\n"
       "def peak():\n"
       "    hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
       "    open(out, 'w').write(hwm)\n"
       "atexit.register(peak)\n"
       "PAGED\n"
       "from platformctl.cli import main\n"
       "sys.argv[0] = 'platformctl'\n"
       "main()\n")
ONE_PAGE = "from platformctl.kernel.cluster.live import LiveCluster; LiveCluster.PAGE = 10 ** 9"


def peak_mib(args: list[str], env: dict[str, str], one_page: bool = False,
             stdout: Path | None = None) -> tuple[float, float, int]:
    """Run ``platformctl ARGS`` (every list in one page with ``one_page``; what it prints into ``stdout``); its peak
    resident memory (MiB), wall seconds and exit code."""
    with tempfile.NamedTemporaryFile(suffix=".hwm") as out, open(stdout or os.devnull, "wb") as printed:
        code = RUN.replace("PAGED", ONE_PAGE if one_page else "pass")
        t0 = time.perf_counter()
        child = subprocess.run([sys.executable, "-c", code, out.name, *args], env=env, stdout=printed,
                               stderr=subprocess.PIPE, check=False)
        wall = time.perf_counter() - t0
        if child.returncode:
            sys.stderr.write(child.stderr.decode()[-2000:])
        kib = Path(out.name).read_text().strip()
    return (int(kib) / 1024 if kib else 0.0), wall, child.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--pods-per-node", type=float, default=40.0)
    args = parser.parse_args()

    t0 = time.perf_counter()
    sim, summary = synthetic_cluster(args.nodes, name="synthetic", pods_per_node=args.pods_per_node)
    sim.run_until_settled()
    pods, nodes = len(sim.list_pods()), len(sim.list_nodes())
    snapshot_bytes = len(json.dumps(sim.snapshot()).encode())
    print(f"cluster: {nodes} nodes, {pods} pods, snapshot {snapshot_bytes / 2**20:.0f} MiB "
          f"(built in {time.perf_counter() - t0:.0f} s)")

    states = {"synthetic": ClusterState(sim)}
    app = KubeAPI(states, threading.Condition(threading.RLock()))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "kubeconfig"
        config.write_text(yaml.safe_dump(kubeconfig("bench", f"http://127.0.0.1:{server.server_port}", ["synthetic"],
                                                    "synthetic")))
        policy = Path(folder) / "policy.yaml"
        policy.write_text(yaml.safe_dump({"targets": dict.fromkeys(POOL_SHAPES, NEW_IMAGE), "maxInFlight": 20}))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KUBECONFIG", "PLATFORMCTL_"))}
        env["PLATFORMCTL_HOME"] = str(Path(folder) / "home")  # no local region of the operator's is asked
        plan = ["rotate", "plan", "--policy", str(policy), "--context", "synthetic", "--kubeconfig", str(config),
                "-o", str(Path(folder) / "plan.json")]
        start, _, rc0 = peak_mib(["rotate", "plan", "--help"], env)
        paged, paged_s, rc1 = peak_mib(plan, env)
        whole, whole_s, rc2 = peak_mib(plan, env, one_page=True)
    app.stopping.set()
    server.shutdown()
    if rc0 or rc1 or rc2:
        print("a plan failed: the figures below are not comparable", file=sys.stderr)
        return 1
    print(f"{'':34}{'peak MiB':>10}{'wall s':>9}")
    print(f"{'command start (--help)':34}{start:>10.0f}{'':>9}")
    print(f"{'rotate plan --context, paged':34}{paged:>10.0f}{paged_s:>9.1f}")
    print(f"{'rotate plan --context, one page':34}{whole:>10.0f}{whole_s:>9.1f}")
    print(f"paged / one page: {paged / whole:.2f}; paged above the command's start: {paged - start:.0f} MiB "
          f"({(paged - start) * 2**20 / pods / 1024:.1f} KiB a pod); snapshot {snapshot_bytes / 2**20:.0f} MiB")
    print(f"paged / the rotation Job's limit ({JOB_LIMIT_MIB} Mi): {paged / JOB_LIMIT_MIB:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
