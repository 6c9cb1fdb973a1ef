"""``ponder calibrate``: the resampling and level rules by hand, then the command end to end
on a real Ponder over the fake engine, and a ``ponder serve`` that loads what it wrote."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
import yaml
from typer.testing import CliRunner

from clients.calibrate import Sample, calibrate_app, choose_levels, frontier, run_on, simulate
from clients.cli import app
from server.app.app import create_app
from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from testing.threaded import serving_in_thread
from tests.evalkit import MODEL, adder, serve_ponder, write_problems


def pool(*answers: str | None, right: str = "1", tokens: int = 10) -> list[Sample]:
    return [Sample(a, a == right, tokens) for a in answers]


def test_auto_resampled_places_the_prompt_as_the_scaffold_does() -> None:
    # Unanimous pilot of 2: stops at 2 samples. Split pilot: draws max_k=4 and votes.
    spec = "auto(pilot=2, mid=0.75, mid_k=2, max_k=4)"
    assert run_on(spec, pool("1", "1", "2", "2")) == (True, 20)
    assert run_on(spec, pool("2", "1", "1", "1")) == (True, 40)
    assert run_on(spec, pool("2", "2", "1", "1")) == (False, 20)  # settled, wrongly
    assert run_on(spec, pool(None, "1", "2", "2")) == (False, 40)  # no answer: not agreeing
    with pytest.raises(ValueError, match="draws up to 8 samples; the pool has 4"):
        run_on("majority(k=8)", pool("1", "1", "1", "1"))


def test_adaptive_resampled_stops_where_its_rule_says() -> None:
    # beta, waves of 2, confidence 0.7: 2-0 gives P = 7/8 >= 0.7, stop at 2.
    assert run_on("adaptive(max_k=4, wave=2, confidence=0.7)", pool("1", "1", "2", "2")) == (
        True,
        20,
    )
    # esc, windows of 2: the first window is split, the second unanimous (answers "2").
    assert run_on('adaptive(rule="esc", window=2, max_k=4)', pool("1", "2", "2", "2")) == (
        False,
        40,
    )


def test_simulate_is_seeded_and_covers_every_problem() -> None:
    pools = {"p": pool("1", "2", "1", "2"), "q": pool("1", "1", "1", "1")}
    a = simulate("majority(k=3)", pools, repeats=5, seed=3)
    assert a == simulate("majority(k=3)", pools, repeats=5, seed=3)
    assert [len(row) for row in a["correct"]] == [2] * 5
    assert all(row[1] == 1.0 for row in a["correct"])  # q is unanimous


def test_levels_come_from_the_frontier() -> None:
    rows = {"s": (0.4, 10.0), "m4": (0.6, 40.0), "m8": (0.66, 80.0), "m16": (0.66, 160.0)}
    assert frontier(rows) == ["s", "m4", "m8"]  # m16 costs more for no more
    levels = choose_levels(rows, {"s": -0.26, "m4": -0.06, "m8": 0.0, "m16": 0.0}, 0.01)
    assert levels == {"minimal": "s", "low": "m4", "medium": "m4", "high": "m8"}
    # A looser tolerance lets m4 be high.
    assert choose_levels(rows, {"s": -0.26, "m4": -0.06, "m8": 0.0}, 0.1)["high"] == "m4"


def test_calibrate_end_to_end_writes_a_policy_that_ponder_serve_loads(tmp_path: Path) -> None:
    problems = write_problems(tmp_path / "add.jsonl", 4)
    out = tmp_path / "cal"
    specs = ["single", "majority(k=4)", "majority(k=8)"]
    with (
        running_fake_engine(FakeEngineConfig(respond=adder)) as engine,
        serve_ponder(engine) as url,
    ):
        args = ["--base-url", url, "--model", MODEL, "--problems", str(problems)]
        args += ["--out", str(out), "--pool", "8", "--repeats", "3", "--no-progress"]
        args += ["--engine", engine.base_url, "--answer-format", "lenient"]
        for spec in specs:
            args += ["--spec", spec]
        result = CliRunner().invoke(calibrate_app, args)
        assert result.exit_code == 0, result.output

        summary = json.loads((out / "calibration.json").read_text())
        assert set(summary["results"]["models"][MODEL]) == set(specs)
        assert summary["frontier"][0] == "single"
        assert (out / "frontier.png").stat().st_size > 0
        assert (out / "specs" / "accuracy_vs_tokens.png").exists()  # ponder eval's own report
        policy = yaml.safe_load((out / "effort_policy.yaml").read_text())
        assert list(policy)[:4] == ["minimal", "low", "medium", "high"]
        assert all(set(entry) == {"spec", "budget"} for entry in policy.values())
        assert policy["minimal"] == {"spec": "single", "budget": 8192}
        if "auto" in policy:
            assert policy["auto"]["spec"].startswith("auto(")
        assert summary["auto_grid"][0]["baseline"]

        # ponder serve loads the written config and each level runs its spec.
        settings = Settings(config=out / "ponder.yaml")
        [served] = settings.served_models()
        assert served.name == MODEL and served.engines == (engine.base_url,)
        assert served.effort_policy is not None
        assert served.effort_policy.level("minimal").spec == policy["minimal"]["spec"]
        with serving_in_thread(create_app(settings)) as ponder:
            client = openai.OpenAI(base_url=f"{ponder}/v1", api_key="x", max_retries=0)
            ids = [m.id for m in client.models.list()]
            assert f"{MODEL}+effort-high" in ids
            reply = client.chat.completions.create(
                model=f"{MODEL}+effort-high",
                messages=[{"role": "user", "content": "What is 123+456="}],
                extra_body={"return_trace": True},
            )
            assert reply.model_extra is not None
            ran = reply.model_extra["ponder"]["scaffold"]
            assert ran == policy["high"]["spec"]
            # reasoning_effort selects the written policy's levels
            for level in ("minimal", "high"):
                chosen = client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": "What is 123+456="}],
                    reasoning_effort=level,
                )
                assert chosen.model_extra is not None
                effort = chosen.model_extra["ponder"]["effort"]
                assert (effort["level"], effort["source"]) == (level, "policy")
                assert effort["spec"] == policy[level]["spec"]
                assert effort["budget"] == policy[level]["budget"]


def test_ponder_lists_calibrate() -> None:
    result = CliRunner().invoke(app, ["calibrate", "--help"])
    assert result.exit_code == 0 and "--problems" in result.output


def test_the_written_policy_is_an_effort_policy_even_when_a_cheaper_spec_draws_more() -> None:
    from clients.calibrate import policy_of
    from server.model_settings import EffortPolicy

    levels = {
        "minimal": "single",
        "low": "adaptive(max_k=32)",  # fewer tokens measured than the next, more samples allowed
        "medium": "majority(k=16)",
        "high": "majority(k=16)",
    }
    policy = EffortPolicy.model_validate(policy_of(levels, "auto(max_k=8)"))
    assert [policy.level(lv).budget for lv in ("minimal", "low", "medium", "high", "auto")] == [
        8192,
        262144,
        262144,
        262144,
        65536,
    ]
