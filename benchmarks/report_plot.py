"""The eval report's accuracy-vs-tokens plot, 8 runs close together: its labels placed
by this checkout against the first ``place_labels`` (a baseline commit) and against the
floor, the plot before labels were placed at all.

Each variant is ``clients/eval/plots.py`` as one commit has it (``git show``), imported
on its own beside this checkout's, drawing the same report of 8 runs with maj@8 (the
test's five close runs and three more) into a PNG. The variants take turns, a warm-up
draw each first, so that load from other work on the machine falls on all of them; each
draw is timed in wall seconds and in this process's CPU seconds (the measure that
survives a shared machine), and the placement alone (``place_labels``) where there is
one. It checks that the baseline and this checkout put every label at the same offset,
and prints the medians and the ratios.

    python -m benchmarks.report_plot                    # 10 draws of each
    python -m benchmarks.report_plot --repeats 20 --baseline 44e8b1b20faf
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PLOTS = "clients/eval/plots.py"
PLACED_COMMIT = "44e8b1b20faf202458c4f114bf2e134f691980ee"
"""The commit that added ``place_labels``: a canvas draw and an annotation per spot tried."""
FLOOR_COMMIT = f"{PLACED_COMMIT}~1"
"""The plot just before: maj@k labels written at their points, dots unnamed."""
RUNS = (
    ("single", 0.20, 1000.0),
    ("majority(k=8)", 0.21, 1050.0),
    ("gsr(n=4)", 0.205, 1100.0),
    ("rc(steps=2)", 0.22, 980.0),
    ("self_refine", 0.19, 1020.0),
    ("rsa(n=4)", 0.215, 1080.0),
    ("deepconf", 0.225, 1010.0),
    ("budget_forcing", 0.195, 1120.0),
)
"""Name, accuracy and completion tokens of each run: all within 15% and 4 points."""


def report() -> dict[str, Any]:
    """The report the test draws, with three runs more: 8 close runs, each with maj@8."""
    maj = {"1": 0.2, "4": 0.3, "8": 0.35}
    return {
        "scaffolds": [
            {
                "scaffold": name,
                "accuracy": accuracy,
                "completion_tokens": tokens,
                "total_tokens": tokens + 300,
                "maj_at": maj,
                "rc_steps": None,
            }
            for name, accuracy, tokens in RUNS
        ]
    }


def module_at(rev: str | None, into: Path) -> ModuleType:
    """``clients/eval/plots.py`` at commit ``rev`` (this checkout's if None), imported
    under a name of its own."""
    name = f"plots_{rev[:12].replace('~', '_') if rev else 'checkout'}"
    path = ROOT / PLOTS
    if rev is not None:
        path = into / f"{name}.py"
        show = ["git", "-C", str(ROOT), "show", f"{rev}:{PLOTS}"]
        path.write_bytes(subprocess.run(show, capture_output=True, check=True).stdout)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Variant:
    """One plots module and what its draws took."""

    name: str
    module: ModuleType
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    place_s: list[float] = field(default_factory=list)
    offsets: list[list[tuple[float, float]]] = field(default_factory=list)

    def draw(self, path: Path, *, record: bool = True) -> None:
        """Draw the report into ``path``, timed (kept if ``record``)."""
        placing = [0.0]
        self.offsets = []
        with _spying(self.module, placing, self.offsets):
            wall, cpu = time.perf_counter(), time.process_time()
            assert self.module.plot_accuracy_vs_tokens(report(), path) == path
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if record:
            self.wall_s.append(wall)
            self.cpu_s.append(cpu)
            self.place_s.append(placing[0])


@contextmanager
def _spying(module: ModuleType, placing: list[float], offsets: list[Any]) -> Iterator[None]:
    """Time ``module.place_labels`` (CPU seconds, into ``placing[0]``) and keep the
    offset of each label it places, where the module has one."""
    real: Callable[..., list[Any]] | None = getattr(module, "place_labels", None)
    if real is None:
        yield
        return

    def timed(*args: Any, **kwargs: Any) -> list[Any]:
        start = time.process_time()
        notes = real(*args, **kwargs)
        placing[0] += time.process_time() - start
        offsets.append([tuple(note.xyann) for note in notes])
        return notes

    setattr(module, "place_labels", timed)  # noqa: B010 (a module built at run time)
    try:
        yield
    finally:
        setattr(module, "place_labels", real)  # noqa: B010


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10, help="timed draws of each variant")
    parser.add_argument("--baseline", default=PLACED_COMMIT, help="commit of the placement to beat")
    parser.add_argument("--floor", default=FLOOR_COMMIT, help="commit of the plot without it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="report-plot-") as tmp:
        out = Path(tmp)
        variants = [
            Variant("floor (no placement)", module_at(args.floor, out)),
            Variant("placed, baseline", module_at(args.baseline, out)),
            Variant("placed, this checkout", module_at(None, out)),
        ]
        for variant in variants:
            variant.draw(out / "warm.png", record=False)
        start = time.perf_counter()
        for repeat in range(1, args.repeats + 1):
            for index, variant in enumerate(variants):
                variant.draw(out / f"{index}.png")
            eta = (time.perf_counter() - start) / repeat * (args.repeats - repeat)
            print(f"round {repeat}/{args.repeats}, ETA {eta:.0f} s", file=sys.stderr, flush=True)
    floor, baseline, checkout = variants
    same = baseline.offsets == checkout.offsets
    print(f"8 runs, maj@8; medians of {args.repeats} draws; baseline {args.baseline[:12]}")
    print(f"{'variant':<24}{'wall':>9}{'CPU':>9}{'placing':>9}")
    for v in variants:
        med = statistics.median
        place = f"{med(v.place_s):8.3f}s" if v.offsets else f"{'-':>9}"
        print(f"{v.name:<24}{med(v.wall_s):8.3f}s{med(v.cpu_s):8.3f}s{place}")
    cpu = {v.name: statistics.median(v.cpu_s) for v in variants}
    print(f"CPU, baseline / this checkout: {cpu[baseline.name] / cpu[checkout.name]:.2f}x")
    print(f"CPU, this checkout / floor:    {cpu[checkout.name] / cpu[floor.name]:.2f}x")
    print(f"CPU, baseline / floor:         {cpu[baseline.name] / cpu[floor.name]:.2f}x")
    placing = statistics.median(baseline.place_s) / statistics.median(checkout.place_s)
    print(f"placing alone, baseline / this checkout: {placing:.1f}x")
    print(f"every label at the same offset as the baseline's: {same}")


if __name__ == "__main__":
    main()
