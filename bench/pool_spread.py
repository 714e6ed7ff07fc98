"""Pool spread benchmark: how many kernel loads a run's workers make, and its wall time, under the pool's way of handing
out cells (`xisa.compile.runner._Pending`) against the one before issue 35 (each worker took the longest cell left),
simulated for a run's shape: no compile, no GPU, seconds.

    python bench/pool_spread.py                 # the shapes below at -j 2 and -j 16
    python bench/pool_spread.py --load 12 --cell 0.4 --jobs 16

Why: a kernel module of a package that asks the device imports that package anew in each load (FlagGems: each of its
generated kernels); a worker pays that once for each spec it touches. Before, on one target every fresh worker took the
longest cell left, so all workers started on the first spec and moved on together, each loading nearly every spec:
on an H100 (16 cores), 613 captured FlagGems cells (47 specs, 13 generated) compiled in 97 s, and the 698 cells of
issue 35's capture (102 specs, 69 generated) were still compiling after 200 s, where a 2-core machine took 305 s.

The model: a cell costs --cell seconds; a worker's first cell of a generated spec costs a --load more, and its first
cell of any module spec one --load (the package's load serves every module spec of it); each worker's first cell a
--load more (its warm-up). Printed per shape and job count: the loads made, the wall seconds, and the wall against
the ideal (the cells' and one load per spec's seconds over the workers), for both ways; then new/old wall.
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import sys
from collections import deque
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xisa.compile.runner import _Pending  # noqa: E402

# Cases per spec, and whether the spec is a generated kernel (`source:`): FlagGems 5.0.2's tests, 198 s on an H100
FLAGGEMS_H100 = ([3, 3, 1, 9, 3, 3, 5, 2, 3, 3, 3, 3, 2, 2, 1, 3, 2, 2, 1, 1, 1, 1, 5, 2, 2, 1, 2, 397, 53, 3, 3, 3,
                  1, 1, 1, 2, 3, 3, 1, 3, 3, 3, 6, 8, 7, 40, 3],
                 [0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0,
                  0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0])
# issue 35's capture (102 specs, 69 generated, 698 cases): its shape as counts, 6 or 7 cases a spec
ISSUE_35 = ([7] * 86 + [6] * 16, [1] * 69 + [0] * 33)


class _Herd(_Pending):
    """The way before issue 35: its own loads' cells, its targets' longest cell, a target nobody has, then the longest
    cell left."""

    def next_for(self, worker, *, others_busy=False):
        for queue in [self.by_kernel.get(place) for place in worker.places] + \
                [self.by_target.get(target) for target in worker.targets] + \
                [self.by_target[target] for target in self.by_target if target not in self.started]:
            index = self._first(queue)
            if index is not None:
                return self._give(index, worker)
        index = self._first(self.order)
        if others_busy and not self._worth_a_load(self.place[index][0]):
            return None
        return self._give(index, worker)


def simulate(kind, counts, generated, jobs, load, cell):
    cells, load_key = [], []
    for spec, (count, made) in enumerate(zip(counts, generated)):
        for _ in range(count):
            cells.append(SimpleNamespace(target=SimpleNamespace(name="sm_90"), kernel=SimpleNamespace(spec_file=spec)))
            load_key.append(spec if made else "package")
    pending = kind(cells, list(range(len(cells))))
    workers = [SimpleNamespace(targets=[], places=[], loaded=set(), busy=False) for _ in range(jobs)]
    events, now, loads = [], 0.0, 0
    while pending or events:
        for worker in workers:   # as `_hand_out`: a worker that would only wait waits while another is busy
            if not worker.busy and pending:
                others = any(w.busy for w in workers if w is not worker)
                index = pending.next_for(worker, others_busy=others)
                if index is None:
                    continue
                seconds = cell + (load if not worker.loaded else 0.0)
                if load_key[index] not in worker.loaded:
                    worker.loaded.add(load_key[index])
                    seconds, loads = seconds + load, loads + 1
                worker.busy = True
                heapq.heappush(events, (now + seconds, id(worker), index, seconds, worker))
        now, _, index, seconds, worker = heapq.heappop(events)
        pending.observe(index, seconds)
        worker.busy = False
    ideal = (len(cells) * cell + len(set(load_key)) * load) / jobs + load
    return loads, now, now / ideal


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=float, default=10.0,
                        help="seconds of a load (FlagGems on an H100: a worker's first cells took 13 to 20 s)")
    parser.add_argument("--cell", type=float, default=0.4, help="seconds of a cell once its kernel is loaded")
    parser.add_argument("--jobs", type=int, action="append", help="workers (repeatable; default 2 and 16)")
    args = parser.parse_args()
    for name, (counts, generated) in (("FlagGems 5.0.2 on an H100", FLAGGEMS_H100), ("issue 35's capture", ISSUE_35)):
        print(f"{name}: {len(counts)} specs, {sum(generated)} generated, {sum(counts)} cells "
              f"(load {args.load:g} s, cell {args.cell:g} s)")
        for jobs in args.jobs or [2, 16]:
            (old_loads, old_wall, old_ratio), (new_loads, new_wall, new_ratio) = (
                simulate(kind, counts, generated, jobs, args.load, args.cell) for kind in (_Herd, _Pending))
            print(f"  -j {jobs:2d}: before {old_loads:4d} loads {old_wall:7.1f} s ({old_ratio:.2f} of ideal); "
                  f"now {new_loads:4d} loads {new_wall:7.1f} s ({new_ratio:.2f} of ideal); now/before "
                  f"{new_wall / old_wall:.2f}")


if __name__ == "__main__":
    main()
