"""deploy/README.md's capacity table ("Capacity on paper") is its formulas worked out: the
engine replicas, Ponder pods, runs per second and Ponder CPU of each row are recomputed
from the row's ``N``, the text's ``L``, ``s`` and per-GPU rates, Ponder's CPU per run as
benchmarks/RESULTS.md records it, and the per-pod target the autoscalers use.
"""

from __future__ import annotations

import math
import re

import yaml

from scaffolds.engines.vllm_server import ROOT
from tests.deploy.artifacts import K8S_DIR

README = ROOT / "deploy" / "README.md"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"

SEQUENCES_PER_RUN = 2.5
"""gsr(n=4): 4 sequences for L/s seconds, then 1 for L/s: 5L tokens over 2L/s seconds."""
CPU_HEADROOM = 0.7
"""The share of a pod's one event-loop core the CPU term allows."""


def section(text: str, title: str) -> str:
    """The text of the ``## `` section whose title starts with ``title``."""
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def number(cell: str) -> float:
    return float(cell.strip().replace(",", "").strip("`*"))


def cpu_per_run_ms() -> float:
    """The median of the *after* row of RESULTS.md's "Ponder's per-run CPU" table."""
    rows = RESULTS.read_text().split("### Ponder's per-run CPU", 1)[1].split("\n### ", 1)[0]
    found = re.search(r"^\| after \|[^|]*\|[^|]*\| ([\d.]+)-([\d.]+)-([\d.]+) ms \|", rows, re.M)
    assert found, "RESULTS.md's per-run CPU table has no 'after' row"
    return float(found.group(2))


def test_the_capacity_table_is_its_formulas() -> None:
    text = section(README.read_text(), "Capacity on paper")
    prose = " ".join(text.split())
    found = re.search(r"`L` = ([\d,]+) tokens and `s` = ([\d,]+) tokens/s", prose)
    assert found
    tokens, speed = number(found.group(1)), number(found.group(2))
    duration = 2 * tokens / speed

    c_ms = cpu_per_run_ms()
    assert f"`c` = **{c_ms:g} ms**" in prose, "the README's c is RESULTS.md's"
    scaled = yaml.safe_load((K8S_DIR / "components" / "keda" / "scaledobject.yaml").read_text())
    target = float(scaled["spec"]["triggers"][0]["metadata"]["threshold"])
    assert f"{target:g} runs per pod" in prose
    min_pods = scaled["spec"]["minReplicaCount"]

    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rates = [number(r) for r in re.findall(r"at ([\d,]+) tokens/s per GPU", lines[0])]
    assert len(rates) == 2
    rows = [[number(cell) for cell in line.strip("|").split("|")] for line in lines[2:]]
    assert [row[0] for row in rows] == [1_000, 10_000, 100_000]
    for n, sequences, generated, *replicas, pods, finished, cores in rows:
        assert sequences == SEQUENCES_PER_RUN * n
        assert generated == SEQUENCES_PER_RUN * n * speed
        assert replicas == [math.ceil(generated / rate) for rate in rates], header
        assert finished == n / duration
        assert math.isclose(cores, finished * c_ms / 1000)
        cpu_pods = math.ceil(finished * c_ms / 1000 / CPU_HEADROOM)
        assert pods == max(min_pods, math.ceil(n / target), cpu_pods)
    assert rows[-1][-3] <= scaled["spec"]["maxReplicaCount"], "the autoscaler reaches it"
