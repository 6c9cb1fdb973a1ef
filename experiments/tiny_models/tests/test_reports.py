"""Every committed report of this study is rebuilt from its committed rows, byte for byte.

Each ``results/STEM.json`` holds the per-problem rows (0/1 per seed and problem, tokens)
and the statistics computed from them; ``report`` computes the statistics again from the
rows and writes ``STEM.{json,md,png}`` into a temp folder, which must equal the committed
files; ``compare`` does the same for the pairs across results files (``STEM.{json,md}``).
PNGs are compared byte for byte when the committed one was drawn by this matplotlib (its
``Software`` text chunk says which); otherwise only their size.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "results"
ADDITION = ("base", "base_300", "gsr", "gsr_before_300", "gsr_after_300")
LIST_SUM = ("rc_listsum_3.5M", "rc_listsum_7M")
VOTING = "voting_addition"
COMPARE = ("part2b_pairs",)
"""Paired differences across results files (``compare``): a ``.json`` and an ``.md``, no plot."""


def _png_text(data: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG."""
    out: dict[str, str] = {}
    at = 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        if kind == b"tEXt":
            key, _, value = data[at + 8 : at + 8 + length].partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        at += 12 + length
    return out


def assert_same_png(rebuilt: Path, committed: Path) -> None:
    import matplotlib

    new, old = rebuilt.read_bytes(), committed.read_bytes()
    assert new[16:24] == old[16:24], f"{committed.name}: another width or height"
    if f"version{matplotlib.__version__}," in _png_text(old).get("Software", ""):
        assert new == old, f"{committed.name} differs from its rebuild"


def _rebuilt(tmp_path: Path, names: list[str]) -> None:
    for name in names:
        assert (tmp_path / name).is_file(), f"{name} was not written"
        if name.endswith(".png"):
            assert_same_png(tmp_path / name, RESULTS / name)
        else:
            assert (tmp_path / name).read_bytes() == (RESULTS / name).read_bytes(), name


@pytest.mark.parametrize("stem", ADDITION)
def test_addition_report_is_rebuilt_byte_for_byte(stem: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from experiments.tiny_models.experiments import main

    main(["report", str(RESULTS / f"{stem}.json"), "--out", str(tmp_path)])
    _rebuilt(tmp_path, [f"{stem}.json", f"{stem}.md", f"{stem}.png"])


@pytest.mark.parametrize("stem", LIST_SUM)
def test_list_sum_report_is_rebuilt_byte_for_byte(stem: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from experiments.tiny_models.rc_experiments import main

    main(["report", str(RESULTS / f"{stem}.json"), "--out", str(tmp_path)])
    names = [f"{stem}.json", f"{stem}.md", f"{stem}.png", f"{stem}_steps.png"]
    _rebuilt(tmp_path, names)


def test_voting_report_is_rebuilt_byte_for_byte(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from experiments.tiny_models.voting import main

    main(["--report", str(RESULTS / f"{VOTING}.json"), "--out", str(tmp_path)])
    _rebuilt(tmp_path, [f"{VOTING}.json", f"{VOTING}.md", f"{VOTING}.png"])


@pytest.mark.parametrize("stem", COMPARE)
def test_comparison_is_rebuilt_byte_for_byte(stem: str, tmp_path: Path) -> None:
    from experiments.tiny_models.experiments import main

    main(["compare", str(RESULTS / f"{stem}.json"), "--out", str(tmp_path)])
    _rebuilt(tmp_path, [f"{stem}.json", f"{stem}.md"])


def test_every_committed_result_has_a_rebuild() -> None:
    stems = {p.name.split(".json")[0] for p in RESULTS.glob("*.json")}
    assert stems == {*ADDITION, *LIST_SUM, VOTING, *COMPARE}
    reports = {p.name.removesuffix(".md") for p in RESULTS.glob("*.md")}
    assert reports == stems
    drawn = {p.name.removesuffix(".png").removesuffix("_steps") for p in RESULTS.glob("*.png")}
    assert drawn == stems - set(COMPARE)
