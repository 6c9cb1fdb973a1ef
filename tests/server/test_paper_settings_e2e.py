"""Issue 38's served-model settings end to end: prompt files (``--prompt-file`` and the
config file) and ``answer_format`` (the model's default, the request field), through
uvicorn on loopback, the fake engine server and the official openai SDK; and a bad
prompt file stopping ``ponder serve`` at start."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from typer.testing import CliRunner

from clients.cli import app
from scaffolds.processes.children import popen_owned, stop_group
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.ponder import running_ponder
from tests.server.test_e2e import MODEL, messages, sdk, settings_for

ROOT = Path(__file__).resolve().parents[2]

RC_FILE = """\
templates:
  rc_reasoning: "PROBLEM: $problem | EARLIER: $summary | Box it."
  rc_summary: "SUM [$problem] [$summary] [$attempt]"
texts:
  rc_no_summary: ""
"""

VOTES = ["The answer is 3", "so \\boxed{4}", "#### 3"]
"""Lenient reading: 3, 4, 3 (3 wins); boxed: -, 4, - (4 wins)."""


def asked(body: dict[str, Any]) -> str:
    """The text of a chat request's last message."""
    return str(body["messages"][-1]["content"])


def respond(body: dict[str, Any]) -> list[str]:
    n, text = int(body.get("n") or 1), asked(body)
    if text.startswith("SUM"):
        return ["I tried 2+2."] * n
    if text.startswith("PROBLEM"):
        return ["2+2=\\boxed{4}"] * n
    return VOTES[:n] if n == len(VOTES) else ["\\boxed{4}"] * n


@pytest.fixture(scope="module")
def rc_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "rc.yaml"
    path.write_text(RC_FILE)
    return path


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig(model=MODEL, respond=respond)) as handle:
        yield handle


@pytest.fixture(scope="module")
def ponder(fake: FakeEngineHandle, rc_file: Path) -> Iterator[str]:
    aliases = {"rc1": 'rc(steps=2, template="one")', "maj3": "majority(k=3)"}
    with running_ponder(settings_for(fake, prompt_files=(rc_file,), aliases=aliases)) as url:
        yield url


def test_a_prompt_files_wording_reaches_the_engine(fake: FakeEngineHandle, ponder: str) -> None:
    fake.state.requests.clear()
    out = sdk(ponder).chat.completions.create(model=f"{MODEL}+rc1", messages=messages())
    assert out.choices[0].message.content == "2+2=\\boxed{4}"
    sent = [asked(r.body) for r in fake.state.requests]
    assert sent == [
        "PROBLEM: What is 2+2? | EARLIER:  | Box it.",
        "SUM [What is 2+2?] [] [2+2=\\boxed{4}]",
        "PROBLEM: What is 2+2? | EARLIER: I tried 2+2. | Box it.",
    ]


def test_a_spec_that_needs_a_template_the_file_lacks_is_a_400(ponder: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk(ponder).chat.completions.create(
            model=MODEL, messages=messages(), extra_body={"scaffold": "rc(steps=2)"}
        )
    error = info.value.body
    assert isinstance(error, dict)
    assert (error["param"], error["code"]) == ("scaffold", "prompt_file_error")
    assert "rc.yaml" in error["message"] and "'rc_reasoning_continue'" in error["message"]


@pytest.mark.parametrize(
    ("fields", "content"),
    [
        ({}, "so \\boxed{4}"),  # the model's default: boxed
        ({"answer_format": "boxed"}, "so \\boxed{4}"),
        ({"answer_format": "lenient"}, "The answer is 3"),
        ({"answer_format": "answer_is"}, "The answer is 3"),  # 3, 4, 3 (the last number)
        ({"answer_format": "boxed_anywhere"}, "so \\boxed{4}"),
        ({"answer_format": "after_answer_marker"}, "so \\boxed{4}"),
    ],
)
def test_answer_format_decides_the_vote(
    fake: FakeEngineHandle, ponder: str, fields: dict[str, str], content: str
) -> None:
    fake.state.requests.clear()
    out = sdk(ponder).chat.completions.create(
        model=f"{MODEL}+maj3", messages=messages(), extra_body=fields
    )
    assert out.choices[0].message.content == content
    [request] = fake.state.requests
    assert request.body["n"] == 3 and "answer_format" not in request.body


def test_a_bad_answer_format_is_a_400_naming_it(ponder: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk(ponder).chat.completions.create(
            model=MODEL, messages=messages(), extra_body={"answer_format": "strict"}
        )
    error = info.value.body
    assert isinstance(error, dict) and error["param"] == "answer_format"


def test_a_model_configured_lenient_votes_leniently(fake: FakeEngineHandle) -> None:
    settings = settings_for(fake, answer_format="lenient", aliases={"maj3": "majority(k=3)"})
    with running_ponder(settings) as url:
        out = sdk(url).chat.completions.create(model=f"{MODEL}+maj3", messages=messages())
    assert out.choices[0].message.content == "The answer is 3"


BAD_FILE = "templates:\n  rc_summary: '$problem $attempt'\n"  # lacks $summary


def test_ponder_serve_with_a_bad_prompt_file_does_not_start(tmp_path: Path) -> None:
    bad = tmp_path / "paper.yaml"
    bad.write_text(BAD_FILE)
    proc = popen_owned(
        [
            sys.executable,
            "-m",
            "clients.cli",
            "serve",
            "--engine",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--port",
            "0",
            "--prompt-file",
            str(bad),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        stop_group(proc)
    assert proc.returncode == 2
    assert str(bad) in err and "'rc_summary'" in err and "$summary" in err


def test_a_config_files_prompt_file_is_checked_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "paper.toml"
    bad.write_text('[templates]\nrc_reasoning = "$problem $summary $notes"\n')
    config = tmp_path / "serve.yaml"
    config.write_text(
        "models:\n  - name: m\n    engines: ['http://127.0.0.1:9/v1']\n"
        f"    prompt_files: ['{bad}']\n"
    )
    result = CliRunner().invoke(app, ["serve", "--config", str(config)])
    assert result.exit_code == 2
    assert str(bad) in result.output and "'rc_reasoning'" in result.output
    assert "$notes" in result.output


@pytest.mark.parametrize(
    ("spec", "param"),
    [
        ('rc(template="two")', "scaffold.template"),
        ('rc(summarizer_thinking="on")', "scaffold.summarizer_thinking"),
        ("self_refine(history=3)", "scaffold.history"),
        ("majority(k=2, solver=abstraction(notes_per_call=0))", "scaffold.solver.notes_per_call"),
    ],
)
def test_a_bad_new_option_is_a_400_naming_the_field(ponder: str, spec: str, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk(ponder).chat.completions.create(
            model=MODEL, messages=messages(), extra_body={"scaffold": spec}
        )
    error = info.value.body
    assert isinstance(error, dict) and error["param"] == param
