"""``ponder serve`` with no engine, on vLLM-CPU: how long until ``/ready`` answers 200, a
baseline commit against this checkout (by default: the children started one after another
against side by side; with ``--fresh-home``: the first start on a machine, every model
prepared before any child starts against the addition model's child starting while the
others are prepared).

Each run is ``ponder serve --port 0`` (the console script beside this interpreter, so
``make serve``'s command), its clock started just before the process: the time to the
``... is bound`` line, to each ``vLLM-CPU serves 'MODEL'`` line, and to the first 200
from ``GET /ready`` (polled every half second). The baseline is the commit before the
children started side by side, exported with ``git archive`` into a temporary folder and
run with ``PYTHONPATH`` there (both variants use this checkout's ``.venv``, its
``.venv-vllm`` through ``PONDER_VLLM_PYTHON``, and the prepared models in
``$PONDER_HOME``: prepare them first, ``make serve`` once, or the first run includes the
conversion; ``--fresh-home`` gives each run an empty temporary ``PONDER_HOME`` instead,
removed after it, so every run prepares SmolLM2 and merges its adapters, and the times
of the ``prepared MODEL`` lines are kept too). Runs alternate baseline, this checkout,
baseline, ... so that load from other work on the machine falls on both; every child is
gone before the next run starts. It prints each run, the ratio of the means, and draws
each run's timeline (``--plot``).

    python -m benchmarks.embedded_start                     # 2 runs of each
    python -m benchmarks.embedded_start --repeats 3 --baseline 0eeff7ed11aa
    python -m benchmarks.embedded_start --fresh-home --baseline 3d0a25a  # first starts
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from scaffolds.processes.children import popen_owned, stop_group

ROOT = Path(__file__).resolve().parent.parent
SERIAL_COMMIT = "0eeff7ed11aa5431d45df140c0669cf6eb1ed670"
"""The last commit whose embedded default started its vLLM children one after another."""
BOUND = re.compile(r"ponder serve: (http://\S+)/v1 is bound")
SERVES = re.compile(r"vLLM-CPU serves '([^']+)'")
PREPARED = re.compile(r"prepared (\S+) in ")


@dataclass(frozen=True)
class Run:
    """One ``ponder serve``: seconds from its start to the bound line, to each model's
    child serving, to each model prepared (a fresh home), and to ``/ready`` answering 200."""

    variant: str
    bound_s: float
    serves_s: dict[str, float]
    ready_s: float
    prepared_s: dict[str, float]


def export(ref: str, into: Path) -> Path:
    """The tracked files of commit ``ref`` of this repository, written under ``into``."""
    tar = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        archive.extractall(into, filter="data")
    return into


def serve_env(tree: Path, home: Path | None = None) -> dict[str, str]:
    """The environment of a run of ``tree``: its code first on the path, this checkout's
    vLLM venv, no engine configured (so the embedded default serves), and ``home`` (if
    given) as ``PONDER_HOME``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PONDER_") or k in ("PONDER_HOME", "PONDER_VLLM_PYTHON")
    }
    env.setdefault("PONDER_VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))
    env["PYTHONPATH"] = str(tree)
    if home is not None:
        env["PONDER_HOME"] = str(home)
    return env


def serve_once(variant: str, tree: Path, timeout_s: float, fresh_home: bool = False) -> Run:
    """Start ``ponder serve --port 0`` in ``tree``, time it until ``/ready`` is 200, stop
    it and wait until every process it started is gone (``fresh_home``: with an empty
    temporary ``PONDER_HOME``, removed after)."""
    with contextlib.ExitStack() as stack:
        home = None
        if fresh_home:
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ponder-home-")))
        return _serve_once(variant, tree, timeout_s, serve_env(tree, home))


def _serve_once(variant: str, tree: Path, timeout_s: float, env: dict[str, str]) -> Run:
    ponder = Path(sys.executable).with_name("ponder")
    lines: list[tuple[float, str]] = []
    start = time.monotonic()
    proc = popen_owned(
        [str(ponder), "serve", "--port", "0"],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr = proc.stderr
    assert stderr is not None

    def read() -> None:
        lines.extend((time.monotonic() - start, line) for line in stderr)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    started: list[psutil.Process] = []
    try:
        ready_s = _wait_ready(proc, lines, start, timeout_s)
        started = psutil.Process(proc.pid).children(recursive=True)
    finally:
        stop_group(proc)
        psutil.wait_procs(started, timeout=120)
    reader.join(timeout=10)
    bound_s = next(t for t, line in lines if BOUND.search(line))
    serves = {m.group(1): t for t, line in lines if (m := SERVES.search(line))}
    prepared = {m.group(1): t for t, line in lines if (m := PREPARED.search(line))}
    if prepared:
        print(f"  ({variant}: this run prepared {', '.join(prepared)}; its time includes that)")
    return Run(variant, bound_s, serves, ready_s, prepared)


def _wait_ready(
    proc: subprocess.Popen[str], lines: list[tuple[float, str]], start: float, timeout_s: float
) -> float:
    """Seconds from ``start`` to the first 200 from ``/ready`` of the URL ``proc`` said it
    is bound to."""
    url = None
    while time.monotonic() - start < timeout_s:
        if proc.poll() is not None:
            said = "".join(line for _, line in lines)
            raise RuntimeError(f"ponder serve exited with {proc.returncode}:\n{said[-3000:]}")
        if url is None:
            url = next((m.group(1) for _, line in lines if (m := BOUND.search(line))), None)
        else:
            try:
                if httpx.get(f"{url}/ready", timeout=5).status_code == 200:
                    return time.monotonic() - start
            except httpx.HTTPError:
                pass
        time.sleep(0.5)
    raise RuntimeError(f"/ready did not answer 200 within {timeout_s:.0f} s")


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def report(runs: list[Run]) -> None:
    """Each run's times, then each variant's mean and the ratio of the means."""
    models = sorted({name for run in runs for name in run.serves_s})
    made = sorted({name for run in runs for name in run.prepared_s})
    header = [
        "variant",
        "bound",
        *[f"{m} prepared" for m in made],
        *[f"{m} up" for m in models],
        "/ready 200",
    ]
    print("\n| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for run in runs:
        ups = [f"{run.serves_s.get(m, float('nan')):.1f} s" for m in models]
        prepared = [f"{run.prepared_s.get(m, float('nan')):.1f} s" for m in made]
        cells = [f"{run.bound_s:.1f} s", *prepared, *ups, f"**{run.ready_s:.1f} s**"]
        print(f"| {run.variant} | " + " | ".join(cells) + " |")
    means = {v: _mean([r.ready_s for r in runs if r.variant == v]) for v in _variants(runs)}
    for variant, mean in means.items():
        print(f"{variant}: mean {mean:.1f} s to /ready")
    if len(means) == 2:
        (before, serial), (after, side_by_side) = means.items()
        print(f"ratio ({before} / {after}): {serial / side_by_side:.2f}x")


def _variants(runs: list[Run]) -> list[str]:
    return list(dict.fromkeys(run.variant for run in runs))


def plot(runs: list[Run], path: Path) -> None:
    """Each run as a bar from start to ``/ready``, each model's child marked as it came up
    (and, a fresh home, a tick as each model was prepared)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 1.4 + 0.6 * len(runs)))
    colors = {v: c for v, c in zip(_variants(runs), ("tab:gray", "tab:blue"), strict=False)}
    markers = dict(zip(sorted({m for r in runs for m in r.serves_s}), "o^sDv", strict=False))
    for row, run in enumerate(runs):
        ax.barh(row, run.ready_s, color=colors[run.variant], alpha=0.35)
        ax.text(run.ready_s, row, f" {run.ready_s:.0f} s", va="center")
        for name, seconds in run.serves_s.items():
            ax.plot(seconds, row, markers[name], color="black", label=name)
        for seconds in run.prepared_s.values():
            ax.plot(seconds, row, "|", color="tab:red", markersize=14, label="a model prepared")
    handles = dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    ax.legend(handles.values(), handles.keys(), loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_yticks(range(len(runs)), [run.variant for run in runs])
    ax.invert_yaxis()
    ax.set_xlim(0, max(run.ready_s for run in runs) * 1.12)
    ax.set_xlabel("seconds from `ponder serve` (markers: each model's vLLM-CPU child up)")
    if any(run.prepared_s for run in runs):
        ax.set_xlabel(
            "seconds from `ponder serve`, empty PONDER_HOME "
            "(markers: each child up; red: each model prepared)"
        )
    ax.set_title("ponder serve, embedded default on vLLM-CPU: time to /ready 200")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=SERIAL_COMMIT, help="the one-after-another commit")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each variant")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a run may take")
    parser.add_argument(
        "--plot",
        type=Path,
        help="default: benchmarks/embedded_start.png, "
        "or embedded_first_start.png with --fresh-home",
    )
    parser.add_argument(
        "--fresh-home",
        action="store_true",
        help="each run with an empty temporary PONDER_HOME: the first start on a machine",
    )
    args = parser.parse_args()
    if not Path(serve_env(ROOT)["PONDER_VLLM_PYTHON"]).exists():
        sys.exit("no vLLM venv (make vllm, or set PONDER_VLLM_PYTHON)")
    with tempfile.TemporaryDirectory(prefix="ponder-baseline-") as folder:
        names = (
            ("prepare first", "prepare meanwhile")
            if args.fresh_home
            else ("one after another", "side by side")
        )
        trees = dict(zip(names, (export(args.baseline, Path(folder)), ROOT), strict=True))
        plan = [variant for _ in range(args.repeats) for variant in trees]
        runs: list[Run] = []
        began = time.monotonic()
        for index, variant in enumerate(plan):
            left = ""
            if runs:
                per_run = (time.monotonic() - began) / len(runs)
                left = f", about {per_run * (len(plan) - index) / 60:.0f} min left"
            print(f"run {index + 1}/{len(plan)}: {variant}{left}", flush=True)
            runs.append(serve_once(variant, trees[variant], args.timeout, args.fresh_home))
            ups = ", ".join(f"{name} {t:.0f} s" for name, t in runs[-1].serves_s.items())
            print(f"  /ready 200 after {runs[-1].ready_s:.1f} s (up: {ups})", flush=True)
    report(runs)
    name = "embedded_first_start.png" if args.fresh_home else "embedded_start.png"
    plot(runs, args.plot or ROOT / "benchmarks" / name)


if __name__ == "__main__":
    main()
