"""How long the simulator takes for one 100 MB all-reduce on 4096 devices (512 hosts of 8),
per algorithm: ``python -m tests.simulate.benchmark_collectives``. The planner needs each in
seconds; the tests assert the event counts that make it so, this prints the wall time."""

from __future__ import annotations

import time

from workbench.simulate import allreduce_programs, parse_cluster, simulate

CLUSTER = "hosts=512,gpus-per-host=8,intra=nvlink:450GB/s,inter=ib:400Gb/s"
NBYTES = 100 * 10**6


def main() -> None:
    cluster = parse_cluster(CLUSTER)
    groups = cluster.hosts_of(cluster.devices)
    print(f"{cluster.size} devices ({CLUSTER}), {NBYTES / 1e6:.0f} MB, add 1e-11 s/byte")
    for algorithm in ("ring", "hierarchical-copy", "reduce-to-one"):
        started = time.perf_counter()
        programs = allreduce_programs(cluster.devices, NBYTES, 1e-11, "g", algorithm, groups)
        timeline = simulate(programs, cluster.link)
        took = time.perf_counter() - started
        print(
            f"{algorithm:>18}: simulated in {took:5.2f} s, {timeline.events:>6} events, "
            f"predicted step {timeline.makespan * 1e3:9.2f} ms"
        )


if __name__ == "__main__":
    main()
