"""Every committed report of runs 1-4 is rebuilt from the committed evaluation rows, byte for
byte, by the command experiments/README.md gives for it.

Only what git keeps is copied to a temp folder (each run's ``eval*/`` rows and run 1's
``eval.jsonl`` problems): no adapter, trace or training row is needed. The six reports
take about 20 s together (grading every candidate with math-verify is most of it). PNGs are
compared byte for byte when the committed one was drawn by this matplotlib (its
``Software`` text chunk says which); otherwise only their size.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import struct
from pathlib import Path

import pytest

RUNS = Path(__file__).resolve().parents[1] / "runs"
R1, R2, R3, R4 = (f"smollm2-r{i}" for i in range(1, 5))
COMMANDS = {
    "r1": (f"report {R1} --problems {R1}/eval.jsonl --seeds 0 1 2", R1, ""),
    "r2": (f"report {R2} --parent {R1} --problems {R1}/eval.jsonl --seeds 0 1 2", R2, ""),
    "r2-seeds-0-1": (
        f"report {R2} --parent {R1} --problems {R1}/eval.jsonl --seeds 0 1 --tag seeds-0-1",
        R2,
        "-seeds-0-1",
    ),
    "r2-rsa": (
        f"report {R2} --parent {R1} --models gsr --scaffold rsa --problems {R1}/eval.jsonl "
        "--seeds 0 1 2",
        R2,
        "-rsa",
    ),
    "r3": (
        f"report {R3} --parent {R2} --models gsr --problems {R1}/eval.jsonl --seeds 0 1 2",
        R3,
        "",
    ),
    "r4": (
        f"report {R4} --parent {R2} --models gsr --problems {R1}/eval.jsonl --seeds 0 1 2",
        R4,
        "",
    ),
}
"""The rebuild command of each report (run in ``experiments/smollm2_refine/runs``), its run
and the report's suffix."""


def _png_text(data: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG."""
    out: dict[str, str] = {}
    at = 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        if data[at + 4 : at + 8] == b"tEXt":
            key, _, value = data[at + 8 : at + 8 + length].partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        at += 12 + length
    return out


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runs' committed evaluation rows and problems, and nothing else."""
    out = tmp_path_factory.mktemp("runs")
    for run in (R1, R2, R3, R4):
        for rows in (RUNS / run).glob("eval*/"):
            shutil.copytree(rows, out / run / rows.name)
    shutil.copy(RUNS / R1 / "eval.jsonl", out / R1 / "eval.jsonl")
    return out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_report_is_rebuilt_from_the_committed_rows(
    name: str, committed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    from experiments.smollm2_refine.__main__ import main

    command, run, suffix = COMMANDS[name]
    monkeypatch.chdir(committed)
    with contextlib.redirect_stdout(io.StringIO()):
        main(command.split())
    for report in (f"report{suffix}.json", f"report{suffix}.md"):
        rebuilt, kept = committed / run / report, RUNS / run / report
        assert rebuilt.read_bytes() == kept.read_bytes(), f"{run}/{report}"
    png = f"accuracy_vs_tokens{suffix}.png"
    new, old = (committed / run / png).read_bytes(), (RUNS / run / png).read_bytes()
    assert new[16:24] == old[16:24], f"{run}/{png}: another width or height"
    if f"version{matplotlib.__version__}," in _png_text(old).get("Software", ""):
        assert new == old, f"{run}/{png}"


def test_every_committed_report_has_a_rebuild() -> None:
    reports = {p.relative_to(RUNS).as_posix() for p in RUNS.glob("*/report*.md")}
    assert reports == {f"{run}/report{suffix}.md" for _, run, suffix in COMMANDS.values()}
