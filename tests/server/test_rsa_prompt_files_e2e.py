"""RSA and QED-Nano's tournament with prompt files, end to end: uvicorn on loopback, the
fake engine server and the official openai SDK. A file that sets only ``rsa_aggregate``
(README's table) serves ``rsa`` with the majority vote; a file with QED-Nano's layout
(placeholder wording) sends each step its system prompt and its template, and the
letter judge decides the tournament."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.ponder import running_ponder
from tests.server.test_e2e import MODEL, messages, sdk, settings_for

AGGREGATE_ONLY = "templates:\n  rsa_aggregate: 'AGG <$problem> $candidates'\n"

QED_LAYOUT = """\
templates:
  rsa_initial: "INIT <$problem>"
  rsa_aggregate: "AGG <$problem> $candidates"
  rsa_select: "SEL <$problem> $candidates"
texts:
  rsa_initial_system: "SYS-GEN"
  rsa_aggregate_system: "SYS-AGG"
  rsa_select_system: "SYS-SEL"
"""


def respond(body: dict[str, Any]) -> list[str]:
    """Members answer 4 then 3; a judge (its prompt starts ``SEL``) picks, by letter,
    the candidate with the larger answer."""
    n, text = int(body.get("n") or 1), str(body["messages"][-1]["content"])
    if text.startswith("SEL"):
        first, second = re.findall(r"\\boxed\{(\d+)\}", text)[:2]
        return [f"\\boxed{{{'A' if int(first) > int(second) else 'B'}}}"] * n
    return ["\\boxed{4}", "\\boxed{3}"][:n] + ["\\boxed{4}"] * max(0, n - 2)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig(model=MODEL, respond=respond)) as handle:
        yield handle


def served(fake: FakeEngineHandle, path: Path, text: str, aliases: dict[str, str]) -> Any:
    path.write_text(text)
    return running_ponder(settings_for(fake, prompt_files=(path,), aliases=aliases))


def test_a_file_setting_only_rsa_aggregate_serves_rsa_with_the_vote(
    fake: FakeEngineHandle, tmp_path: Path
) -> None:
    aliases = {"rsa2": "rsa(n=2, k=2, rounds=1)"}
    with served(fake, tmp_path / "agg.yaml", AGGREGATE_ONLY, aliases) as url:
        fake.state.requests.clear()
        out = sdk(url).chat.completions.create(model=f"{MODEL}+rsa2", messages=messages())
        assert out.choices[0].message.content in {"\\boxed{4}", "\\boxed{3}"}
        sent = [r.body["messages"] for r in fake.state.requests]
        assert sent[0] == [
            {
                "role": "user",
                "content": "What is 2+2?\n\nReason step by step, and put your final answer "
                "within \\boxed{}.",
            }
        ]
        assert all(m[-1]["content"].startswith("AGG <What is 2+2?> ") for m in sent[1:])
        assert len(sent) == 3
        # The tournament needs rsa_select, which the file leaves out: a 400 naming it.
        with pytest.raises(openai.BadRequestError) as info:
            sdk(url).chat.completions.create(
                model=MODEL,
                messages=messages(),
                extra_body={"scaffold": 'rsa(n=2, k=2, rounds=1, select="pairwise")'},
            )
    error = info.value.body
    assert isinstance(error, dict)
    assert (error["param"], error["code"]) == ("scaffold", "prompt_file_error")
    assert "agg.yaml" in error["message"] and "'rsa_select'" in error["message"]


def test_qed_nanos_layout_reaches_the_engine_and_the_letter_judge_decides(
    fake: FakeEngineHandle, tmp_path: Path
) -> None:
    aliases = {"qed": 'rsa(n=2, k=1, rounds=0, select="pairwise", verdict="letter")'}
    with served(fake, tmp_path / "qed.yaml", QED_LAYOUT, aliases) as url:
        fake.state.requests.clear()
        out = sdk(url).chat.completions.create(model=f"{MODEL}+qed", messages=messages())
    # One match, 4 (A) against 3 (B): the judge says A, so 4 wins (read as digits, the
    # verdict would be unreadable and 3, the last, would win).
    assert out.choices[0].message.content == "\\boxed{4}"
    sent = [r.body["messages"] for r in fake.state.requests]
    assert sent[0] == [
        {"role": "system", "content": "SYS-GEN"},
        {"role": "user", "content": "INIT <What is 2+2?>"},
    ]
    assert sent[1][0] == {"role": "system", "content": "SYS-SEL"}
    assert "#### Candidate A" in sent[1][1]["content"]
    assert "#### Candidate B" in sent[1][1]["content"]
    assert len(sent) == 2
