"""Benchmark: resolve 200 image manifests (a realistic inheritance tree, six levels deep).

Writes 200 manifests shaped like the shipped ones (packages, files, sysctls, services, scripts, tags,
some ``!replace``) into a temporary folder, then prints, measured side by side in one run, the time
``load_manifests`` takes to read, check and resolve them all, and the time parsing the same files'
YAML alone takes, with their ratio. The issue's target: resolving 200 manifests takes well
under a second. Not part of the test run.

    .venv/bin/python benchmarks/resolve_manifests.py [--count 200]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ami.manifest import load_manifests, parse_yaml


def write_tree(folder: Path, count: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    (folder / "img-000.yaml").write_text(
        "name: img-000\nversion: 1.0.0\nfamily: general\nsource: {ssmParameter: /aws/service/base}\n"
        "architecture: x86_64\nkubernetesVersion: '1.31'\npackages: [containerd, runc]\n"
        "sysctls: {net.ipv4.ip_forward: 1}\nservices: {containerd: enabled}\ntags: {platform: platformctl}\n")
    depth = {0: 0}
    for i in range(1, count):
        parent = rng.choice([p for p in depth if depth[p] < 6])
        depth[i] = depth[parent] + 1
        replace = "!replace " if rng.random() < 0.1 else ""
        files = "".join(f"  /etc/app/{i}-{k}.conf: {{content: \"key={k}\\n\", mode: '0640'}}\n" for k in range(3))
        (folder / f"img-{i:03d}.yaml").write_text(
            f"name: img-{i:03d}\nversion: 1.{i}.0\nfamily: {rng.choice(['general', 'ml', 'custom'])}\nparent: img-{parent:03d}\n"
            f"packages: {replace}[{', '.join(f'pkg-{i}-{k}' for k in range(5))}]\n"
            f"files:\n{files}"
            f"sysctls: {{{', '.join(f'kernel.p{i}_{k}: {k}' for k in range(4))}}}\n"
            f"services: {{svc-{i}: enabled}}\n"
            f"scripts:\n  - {{name: step-{i}, run: 'echo {i}'}}\n"
            f"kernelParameters: [p{i}=1]\ntags: {{owner: team-{i % 7}}}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_tree(folder, args.count)
        t0 = time.perf_counter()
        for path in sorted(folder.glob("*.yaml")):
            parse_yaml(path.read_text())
        parse = time.perf_counter() - t0
        t0 = time.perf_counter()
        manifests = load_manifests(folder)
        resolve = time.perf_counter() - t0
    depth = max(len(manifests.generations()), 1)
    print(f"manifests: {len(manifests.images)}, inheritance depth {depth}")
    print(f"YAML parsing of the files alone: {parse * 1000:.0f} ms")
    print(f"load, check and resolve: {resolve * 1000:.0f} ms   (target: well under 1 s)")
    print(f"ratio resolve / YAML parsing: {resolve / parse:.2f}x")


if __name__ == "__main__":
    main()
