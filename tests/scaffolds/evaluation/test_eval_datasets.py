"""Loading problems: JSONL, Batch API files, bad lines, HF folders, the addition task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clients.eval.cli import eval_app
from scaffolds.evaluation.grading import MathGrader
from scaffolds.evaluation.problems import load_problems
from scaffolds.evaluation.synthetic import addition_problems, arithmetic_problems

SHARED = Path(__file__).resolve().parents[4] / "shared" / "data"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "problems.jsonl"


def test_bad_lines_are_reported_with_their_numbers_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    lines = [
        json.dumps({"id": "a", "problem": "1+1=", "answer": "2", "level": 3}),
        "{not json",
        json.dumps(["a", "list"]),
        json.dumps({"id": "b", "answer": "4"}),  # no problem text
        "",
        json.dumps({"id": "a", "problem": "again", "answer": "1"}),  # duplicate id
        json.dumps({"question": "2+3=", "answer": 5}),  # aliases, no id
    ]
    path.write_bytes(("\n".join(lines) + "\n").encode() + b"\xff\xfe oops\n")
    loaded = load_problems(str(path))
    assert [p.id for p in loaded.problems] == ["a", "line-7"]
    assert loaded.problems[0].meta == {"level": 3}
    assert loaded.problems[1].answer == "5"
    assert [b.line for b in loaded.bad] == [2, 3, 4, 6, 8]
    assert "invalid JSON" in loaded.bad[0].reason
    assert "duplicate id 'a'" in loaded.bad[3].reason
    assert "UTF-8" in loaded.bad[4].reason


def test_batch_api_rows(tmp_path: Path) -> None:
    rows = [
        {
            "custom_id": "req-1",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "gpt-x",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "What is 6*7?"},
                ],
                "temperature": 0.3,
                "metadata": {"answer": "42"},
            },
        },
        {"custom_id": "req-2", "url": "/v1/embeddings", "body": {"input": "x"}},
        {"custom_id": "req-3", "body": {"messages": []}},
    ]
    path = tmp_path / "batch.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    loaded = load_problems(str(path))
    [problem] = loaded.problems
    assert (problem.id, problem.problem, problem.answer) == ("req-1", "What is 6*7?", "42")
    assert problem.body is not None and "model" not in problem.body
    assert problem.messages()[0] == {"role": "system", "content": "Be brief."}
    assert [b.line for b in loaded.bad] == [2, 3]


async def test_readme_examples_load_and_grade_against_themselves() -> None:
    loaded = load_problems(str(EXAMPLES))
    assert len(loaded.problems) >= 5 and not loaded.bad
    grader = MathGrader(inline=True)
    for problem in loaded.problems:
        assert problem.answer is not None
        grade = await grader.grade(problem, f"So the answer is \\boxed{{{problem.answer}}}.")
        assert grade.correct is True, problem.id
    await grader.aclose()


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        load_problems(str(tmp_path / "absent.jsonl"))


@pytest.mark.skipif(not SHARED.is_dir(), reason="no shared data folder")
def test_shared_sets_load_by_path() -> None:
    gsm = load_problems(str(SHARED / "gsm8k_test.jsonl"), limit=5)
    assert len(gsm.problems) == 5 and not gsm.bad
    assert gsm.problems[0].answer == "18" and "solution" not in gsm.problems[0].meta
    math = load_problems(str(SHARED / "math500_test.jsonl"))
    assert len(math.problems) == 500 and math.problems[0].meta.get("source") is not None


def test_local_hugging_face_folder(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    data = datasets.Dataset.from_list([{"id": "h1", "problem": "1+2=", "answer": "3"}])
    data.save_to_disk(str(tmp_path / "hf"))
    loaded = load_problems(str(tmp_path / "hf"))
    assert [(p.id, p.answer) for p in loaded.problems] == [("h1", "3")]


def test_make_addition_command(tmp_path: Path) -> None:
    out = tmp_path / "add.jsonl"
    result = CliRunner().invoke(
        eval_app, ["make-addition", "--count", "20", "--seed", "7", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == addition_problems(20, seed=7)
    for row in rows:
        a, b = row["problem"].rstrip("=").split("+")
        assert 100 <= int(a) <= 999 and 100 <= int(b) <= 999
        assert int(row["answer"]) == int(a) + int(b)
    assert addition_problems(20, seed=8) != rows


def test_make_arithmetic_command(tmp_path: Path) -> None:
    out = tmp_path / "arith.jsonl"
    result = CliRunner().invoke(
        eval_app, ["make-arithmetic", "--count", "300", "--seed", "7", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == arithmetic_problems(300, seed=7) != arithmetic_problems(300, seed=8)
    assert len({r["id"] for r in rows}) == 300
    for row in rows:
        expression = row["problem"].removeprefix("What is ").split("?")[0]
        assert set(expression) <= set("0123456789 +-*()")
        assert eval(expression) == int(row["answer"])  # the text means what the answer says
    ops = [sum(c in "+-*" for c in r["problem"]) for r in rows]
    assert {1, 2} <= set(ops)
