"""Benchmarks by name: ``--dataset gsm8k`` (or ``math500``, ``aime24``, ``aime25``).

The first use downloads the rows from the Hugging Face Hub's dataset viewer API (plain
HTTP, no ``datasets`` package) and caches them as problem JSONL under
``$PONDER_HOME/datasets/NAME.jsonl`` (default ``~/.cache/ponder``); later uses read the
cache, offline. Without a network the error says how to pass a local file instead.
``PONDER_HF_DATASETS_SERVER`` names another viewer endpoint (a mirror).

>>> NAMED["gsm8k"].hub, NAMED["gsm8k"].split
('openai/gsm8k', 'test')
>>> NAMED["gsm8k"].convert(3, {"question": "1+1?", "answer": "one and one\\n#### 2"})["answer"]
'2'
>>> sorted(NAMED)
['aime24', 'aime25', 'gsm8k', 'math500']
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

__all__ = ["NAMED", "NamedDataset", "datasets_home", "named_dataset_file"]

VIEWER = "https://datasets-server.huggingface.co"
_PAGE = 100
"""Rows per request (the viewer API's most)."""


def _gsm8k(index: int, row: Mapping[str, Any]) -> dict[str, Any]:
    solution = str(row["answer"])
    answer = solution.rsplit("####", 1)[-1].strip().replace(",", "")
    return {
        "id": f"gsm8k-test-{index}",
        "problem": row["question"],
        "answer": answer,
        "solution": solution,
    }


def _math500(index: int, row: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": row.get("unique_id") or f"math500-{index}", **_kept(row)}


def _aime(prefix: str) -> Callable[[int, Mapping[str, Any]], dict[str, Any]]:
    def convert(index: int, row: Mapping[str, Any]) -> dict[str, Any]:
        return {"id": f"{prefix}-{row.get('id', index)}", **_kept(row)}

    return convert


def _kept(row: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("problem", "answer", "solution", "subject", "level", "url", "year")
    return {key: row[key] for key in keys if row.get(key) is not None}


@dataclass(frozen=True)
class NamedDataset:
    """A benchmark on the Hub: where it lives and how a row becomes a problem row."""

    name: str
    hub: str
    config: str
    split: str
    convert: Callable[[int, Mapping[str, Any]], dict[str, Any]]


NAMED: Mapping[str, NamedDataset] = {
    d.name: d
    for d in (
        NamedDataset("gsm8k", "openai/gsm8k", "main", "test", _gsm8k),
        NamedDataset("math500", "HuggingFaceH4/MATH-500", "default", "test", _math500),
        NamedDataset("aime24", "HuggingFaceH4/aime_2024", "default", "train", _aime("aime24")),
        NamedDataset("aime25", "math-ai/aime25", "default", "test", _aime("aime25")),
    )
}
"""The benchmarks ``--dataset`` knows by name."""


def datasets_home() -> Path:
    """Where named datasets are cached: ``$PONDER_HOME/datasets``."""
    home = os.environ.get("PONDER_HOME")
    return (Path(home) if home else Path.home() / ".cache" / "ponder") / "datasets"


def named_dataset_file(name: str, *, timeout_s: float = 60.0) -> Path:
    """The cached JSONL of the named benchmark, downloaded on first use; ValueError (how
    to pass a local file instead) when it cannot be."""
    dataset = NAMED[name]
    target = datasets_home() / f"{name}.jsonl"
    if target.is_file():
        return target
    viewer = os.environ.get("PONDER_HF_DATASETS_SERVER", VIEWER).rstrip("/")
    try:
        rows = _download(viewer, dataset, timeout_s)
    except (httpx.HTTPError, ValueError, KeyError) as err:
        raise ValueError(
            f"cannot download {name!r} ({dataset.hub}, split {dataset.split}) from the "
            f"Hugging Face Hub ({type(err).__name__}: {err}). Offline, pass a local file "
            f"instead: --dataset path/to/{name}.jsonl, one JSON object a line with "
            '"problem" and "answer" (and "id")'
        ) from None
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with partial.open("w", encoding="utf-8") as handle:
        for index, row in enumerate(rows):
            handle.write(json.dumps(dataset.convert(index, row), ensure_ascii=False) + "\n")
    partial.replace(target)  # atomic: an interrupted download never looks cached
    return target


def _download(viewer: str, dataset: NamedDataset, timeout_s: float) -> list[Mapping[str, Any]]:
    rows: list[Mapping[str, Any]] = []
    with httpx.Client(timeout=timeout_s, follow_redirects=True) as client:
        while True:
            params: dict[str, str | int] = {
                "dataset": dataset.hub,
                "config": dataset.config,
                "split": dataset.split,
                "offset": len(rows),
                "length": _PAGE,
            }
            response = client.get(f"{viewer}/rows", params=params)
            response.raise_for_status()
            page = response.json()
            rows += [item["row"] for item in page["rows"]]
            if not page["rows"] or len(rows) >= int(page["num_rows_total"]):
                return rows
