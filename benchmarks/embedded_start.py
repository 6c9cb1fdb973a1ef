"""``ponder serve`` with no engine, on vLLM-CPU: how long until ``/ready`` answers 200,
its children started one after another (a baseline commit) against side by side (this
checkout).

Each run is ``ponder serve --port 0`` (the console script beside this interpreter, so
``make serve``'s command), its clock started just before the process: the time to the
``... is bound`` line, to each ``vLLM-CPU serves 'MODEL'`` line, and to the first 200
from ``GET /ready`` (polled every half second). The baseline is the commit before the
children started side by side, exported with ``git archive`` into a temporary folder and
run with ``PYTHONPATH`` there (both variants use this checkout's ``.venv``, its
``.venv-vllm`` through ``PONDER_VLLM_PYTHON``, and the prepared models in
``$PONDER_HOME``: prepare them first, ``make serve`` once, or the first run includes the
conversion). Runs alternate baseline, this checkout, baseline, ... so that load from
other work on the machine falls on both; every child is gone before the next run starts.
It prints each run, the ratio of the means, and draws each run's timeline (``--plot``).

    python -m benchmarks.embedded_start                     # 2 runs of each
    python -m benchmarks.embedded_start --repeats 3 --baseline 0eeff7ed11aa
"""

from __future__ import annotations

import argparse
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


@dataclass(frozen=True)
class Run:
    """One ``ponder serve``: seconds from its start to the bound line, to each model's
    child serving, and to ``/ready`` answering 200."""

    variant: str
    bound_s: float
    serves_s: dict[str, float]
    ready_s: float


def export(ref: str, into: Path) -> Path:
    """The tracked files of commit ``ref`` of this repository, written under ``into``."""
    tar = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        archive.extractall(into, filter="data")
    return into


def serve_env(tree: Path) -> dict[str, str]:
    """The environment of a run of ``tree``: its code first on the path, this checkout's
    vLLM venv, no engine configured (so the embedded default serves)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PONDER_") or k in (
        "PONDER_HOME", "PONDER_VLLM_PYTHON")}  # fmt: skip
    env.setdefault("PONDER_VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))
    env["PYTHONPATH"] = str(tree)
    return env


def serve_once(variant: str, tree: Path, timeout_s: float) -> Run:
    """Start ``ponder serve --port 0`` in ``tree``, time it until ``/ready`` is 200, stop
    it and wait until every process it started is gone."""
    ponder = Path(sys.executable).with_name("ponder")
    lines: list[tuple[float, str]] = []
    start = time.monotonic()
    proc = popen_owned(
        [str(ponder), "serve", "--port", "0"], cwd=tree, env=serve_env(tree),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
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
    if any("preparing" in line or "prepared" in line for _, line in lines):
        print(f"  ({variant}: this run prepared a model first; its time includes that)")
    return Run(variant, bound_s, serves, ready_s)


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
    header = ["variant", "bound", *[f"{m} up" for m in models], "/ready 200"]
    print("\n| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for run in runs:
        ups = [f"{run.serves_s.get(m, float('nan')):.1f} s" for m in models]
        cells = [f"{run.bound_s:.1f} s", *ups, f"**{run.ready_s:.1f} s**"]
        print(f"| {run.variant} | " + " | ".join(cells) + " |")
    means = {v: _mean([r.ready_s for r in runs if r.variant == v]) for v in _variants(runs)}
    for variant, mean in means.items():
        print(f"{variant}: mean {mean:.1f} s to /ready")
    if len(means) == 2:
        serial, side_by_side = means.values()
        print(f"ratio (one after another / side by side): {serial / side_by_side:.2f}x")


def _variants(runs: list[Run]) -> list[str]:
    return list(dict.fromkeys(run.variant for run in runs))


def plot(runs: list[Run], path: Path) -> None:
    """Each run as a bar from start to ``/ready``, each model's child marked as it came up."""
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
    handles = dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    ax.legend(handles.values(), handles.keys(), loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_yticks(range(len(runs)), [run.variant for run in runs])
    ax.invert_yaxis()
    ax.set_xlim(0, max(run.ready_s for run in runs) * 1.12)
    ax.set_xlabel("seconds from `ponder serve` (markers: each model's vLLM-CPU child up)")
    ax.set_title("ponder serve, embedded default on vLLM-CPU: time to /ready 200")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=SERIAL_COMMIT, help="the one-after-another commit")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each variant")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a run may take")
    parser.add_argument("--plot", type=Path, default=ROOT / "benchmarks" / "embedded_start.png")
    args = parser.parse_args()
    if not Path(serve_env(ROOT)["PONDER_VLLM_PYTHON"]).exists():
        sys.exit("no vLLM venv (make vllm, or set PONDER_VLLM_PYTHON)")
    with tempfile.TemporaryDirectory(prefix="ponder-baseline-") as folder:
        trees = {"one after another": export(args.baseline, Path(folder)), "side by side": ROOT}
        plan = [variant for _ in range(args.repeats) for variant in trees]
        runs: list[Run] = []
        began = time.monotonic()
        for index, variant in enumerate(plan):
            left = ""
            if runs:
                per_run = (time.monotonic() - began) / len(runs)
                left = f", about {per_run * (len(plan) - index) / 60:.0f} min left"
            print(f"run {index + 1}/{len(plan)}: {variant}{left}", flush=True)
            runs.append(serve_once(variant, trees[variant], args.timeout))
            ups = ", ".join(f"{name} {t:.0f} s" for name, t in runs[-1].serves_s.items())
            print(f"  /ready 200 after {runs[-1].ready_s:.1f} s (up: {ups})", flush=True)
    report(runs)
    plot(runs, args.plot)


if __name__ == "__main__":
    main()
