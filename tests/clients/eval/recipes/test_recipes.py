"""Every named recipe runs end to end at toy scale through ``ponder eval --recipe``: an
owned ``ponder serve`` child in front of the fake engine (on loopback), 2 problems from a
local file (never the network), a placeholder prompt file; and what a recipe refuses."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clients.eval.cli import eval_app
from clients.eval.recipes import RECIPES, Recipe, recipe_named
from clients.eval.recipes.serving import RecipeError, check_prompt_file, serve_command
from scaffolds.spec.build import build_strategy
from scaffolds.spec.registry import default_registry, get_prompt_set
from testing.fake_engine import FakeEngineHandle, running_fake_engine
from tests.evalkit import MODEL, ponder_over_fake, write_problems


def placeholder_prompts(recipe: Recipe, path: Path) -> Path:
    """A prompt file that sets every key the recipe names with placeholder wording (each
    template with the placeholders Ponder's own template of that name uses)."""
    whole = get_prompt_set("default", default_registry())
    templates, texts = {}, {}
    for key in recipe.served.prompt_keys:
        if key.name in whole.texts:
            texts[key.name] = f"[placeholder {key.name}]"
        else:
            fields = " ".join(f"${f}" for f in sorted(whole.templates[key.name].fields))
            templates[key.name] = f"Placeholder {key.name}: {fields}"
    path.write_text(yaml.safe_dump({"templates": templates, "texts": texts}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def engine() -> Iterator[FakeEngineHandle]:
    with running_fake_engine() as handle:
        yield handle


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_recipe_runs_end_to_end(name: str, engine: FakeEngineHandle, tmp_path: Path) -> None:
    recipe = recipe_named(name)
    data = write_problems(tmp_path / "two.jsonl", 2)
    out = tmp_path / "run"
    args = ["--recipe", name, "--engine", engine.base_url, "--dataset", str(data)]
    args += ["--limit", "2", "--samples", "1", "--out", str(out), "--no-progress"]
    args += ["--grade-workers", "1"]
    if recipe.served.prompt_keys:
        args += ["--prompt-file", str(placeholder_prompts(recipe, tmp_path / "prompts.yaml"))]
    if recipe.served.reward_model:
        args += ["--reward-url", engine.base_url.removesuffix("/v1") + "/pooling"]
    if recipe.evaluation.grader == "judge":
        args += ["--judge-url", engine.base_url, "--judge-model", MODEL]
    started = time.monotonic()
    result = CliRunner().invoke(eval_app, args)
    print(f"{name}: {time.monotonic() - started:.1f} s")
    assert result.exit_code == 0, result.output + (out / "serve.log").read_text()
    report = json.loads((out / "report.json").read_text())
    assert [s["scaffold"] for s in report["scaffolds"]] == [recipe.served.spec]
    assert report["problems"] == 2 and report["answer_format"] == recipe.served.answer_format
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 2 and not any(r.get("error") for r in records), records


@pytest.mark.parametrize("name", list(RECIPES))
def test_each_recipe_is_complete_and_its_spec_builds_under_its_server_flags(name: str) -> None:
    recipe = recipe_named(name)
    flags = recipe.served.serve_flags
    calls = int(flags[flags.index("--spec-max-calls") + 1]) if "--spec-max-calls" in flags else 256
    from scaffolds.spec.build import SpecLimits

    build_strategy(recipe.served.spec, limits=SpecLimits(max_calls=calls))
    assert recipe.sources and recipe.reported.citation and recipe.reference.startswith("https://")
    assert recipe.served.timeout_s is None  # no time limit unless a recipe says so
    whole = get_prompt_set("default", default_registry())
    for key in recipe.served.prompt_keys:
        assert key.name in whole.templates or key.name in whole.texts, key
        assert key.source


def test_a_missing_prompt_key_is_one_line_naming_it_and_where_the_reference_keeps_it(
    tmp_path: Path,
) -> None:
    rsa = recipe_named("rsa")
    partial = tmp_path / "p.yaml"
    partial.write_text("templates:\n  rsa_select: 'pick: $problem $candidates'\n")
    with pytest.raises(RecipeError) as raised:
        check_prompt_file(rsa, partial)
    message = str(raised.value)
    assert "\n" not in message and "rsa_aggregate" in message
    assert "HyperPotatoNeo/RSA eval_loop.py:145" in message
    with pytest.raises(RecipeError, match="needs --prompt-file"):
        check_prompt_file(rsa, None)
    check_prompt_file(recipe_named("s1"), None)  # s1 needs no wording of its own

    # the same through the command, before anything is started
    data = write_problems(tmp_path / "two.jsonl", 2)
    args = ["--recipe", "rsa", "--engine", "http://127.0.0.1:9/v1", "--model", "m"]
    result = CliRunner().invoke(
        eval_app,
        [
            *args,
            "--prompt-file",
            str(partial),
            "--dataset",
            str(data),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 2 and "rsa_aggregate" in result.output
    assert not (tmp_path / "o" / "serve.log").exists()


def test_recipe_usage_errors() -> None:
    cli = CliRunner()
    unknown = cli.invoke(eval_app, ["--recipe", "nope", "--engine", "http://h/v1"])
    assert unknown.exit_code == 2 and "the recipes: rc, qed-nano-rc" in unknown.output
    both = cli.invoke(eval_app, ["--recipe", "s1"])
    assert both.exit_code == 2 and "--engine" in both.output
    scaffold = cli.invoke(eval_app, ["--recipe", "s1", "--engine", "http://h/v1", "-s", "single"])
    assert scaffold.exit_code == 2 and "leave out --scaffold" in scaffold.output
    reward = cli.invoke(eval_app, ["--recipe", "its-hub-beam", "--engine", "http://h/v1"])
    assert reward.exit_code == 2 and "--reward-url" in reward.output


def test_the_serve_command_serves_the_spec_as_an_alias_with_the_recipes_flags() -> None:
    command = serve_command(
        recipe_named("its-hub-beam"),
        engine="http://e/v1",
        model="m",
        prompt_file=Path("p.yaml"),
        reward_url="http://r/pooling",
    )
    assert command[1:4] == ["-m", "clients.cli", "serve"]
    assert command[command.index("--alias") + 1].startswith('its-hub-beam=beam(semantics="its_hub"')
    assert command[command.index("--reward-url") + 1] == "http://r/pooling"
    assert command[command.index("--spec-max-calls") + 1] == "1185"
    assert command[command.index("--reward-step-tag") + 1] == "<extra_0>"
    assert "--max-budget-timeout" not in command


def test_recipes_lists_every_recipe_with_its_number_and_what_differs() -> None:
    result = CliRunner().invoke(eval_app, ["recipes"])
    assert result.exit_code == 0, result.output
    for recipe in RECIPES.values():
        assert f"{recipe.name}: " in result.output
        assert recipe.reported.number in result.output
    assert result.output.count("differs: ") >= len(RECIPES)
    assert "prompt file sets rsa_aggregate: HyperPotatoNeo/RSA eval_loop.py:145" in result.output


def test_each_recipe_transcribes_its_papers_number_or_says_why_not() -> None:
    """A recipe's number is the paper's, with a figure in it (a percentage, a score, a
    budget), or "not transcribed: " and what was looked at; none is left for later. Only
    deepconf-high's is missing: the paper's keep-90% rows are in tables no source reachable
    here reproduces."""
    missing = set()
    for recipe in RECIPES.values():
        number = recipe.reported.number
        assert "yet" not in number, recipe.name
        if number.startswith("not transcribed"):
            reason = number.removeprefix("not transcribed: ")
            assert reason != number and len(reason.split()) >= 8, recipe.name
            missing.add(recipe.name)
        else:
            assert any(ch.isdigit() for ch in number), recipe.name
        assert recipe.reported.citation, recipe.name
    assert missing == {"deepconf-high"}


def readme_row(recipe: Recipe) -> str:
    """The recipe's row in README's "Reproducing the papers" table: ``|`` escaped, and
    ``<`` outside code spans. Print the whole table with
    ``python -c "from tests.clients.eval.recipes.test_recipes import readme_table as t;
    print(t())"``.
    """

    def code(text: str) -> str:
        return "`" + text.replace("|", "\\|") + "`"

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("<", "&lt;")

    flags = recipe.served.serve_flags
    served = f"<br>served with {code(shlex.join(flags))}" if flags else ""
    differs = "; ".join(recipe.differs) or "nothing known"
    return (
        f"| `{recipe.name}`: {cell(recipe.title)} ([reference]({recipe.reference})) "
        f"| {code(recipe.command())}<br>{code(recipe.served.spec)}{served} "
        f"| {cell(recipe.reported.number)} ({cell(recipe.reported.citation)}) "
        f"| {cell(differs)} |"
    )


def readme_table() -> str:
    """README's recipe table, header and a row per recipe, in :data:`RECIPES`' order."""
    head = (
        "| recipe | command and spec | the paper's number | what still differs |\n|---|---|---|---|"
    )
    return "\n".join([head, *(readme_row(recipe) for recipe in RECIPES.values())])


def test_the_readme_table_is_the_recipes() -> None:
    """README's "Reproducing the papers" has the recipes' table as :func:`readme_table`
    writes it: a row per recipe with its command, its spec, the paper's number and each
    thing that still differs, as the recipe says them."""
    readme = (Path(__file__).resolve().parents[4] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Reproducing the papers", 1)[1].split("\n## ", 1)[0]
    assert readme_table() in section
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == len(RECIPES)


def test_a_recipe_sent_to_a_running_ponder(tmp_path: Path) -> None:
    """``--base-url``: the recipe's spec, sampling and reader go to the Ponder already
    running (its prompt files are its own), and nothing is started."""
    data = write_problems(tmp_path / "two.jsonl", 2)
    with ponder_over_fake() as (url, engine):
        args = ["--recipe", "esc", "--base-url", url, "--model", MODEL, "--dataset", str(data)]
        args += ["--out", str(tmp_path / "o"), "--no-progress", "--grade-workers", "1"]
        result = CliRunner().invoke(eval_app, args)
        assert result.exit_code == 0, result.output
        bodies = [r.body for r in engine.state.requests]
    assert bodies and all(b.get("temperature") == 0.5 for b in bodies)
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert [s["scaffold"] for s in report["scaffolds"]] == [recipe_named("esc").served.spec]
    assert not (tmp_path / "o" / "serve.log").exists()


def test_qed_nano_rc_summarizes_with_the_solvers_own_model() -> None:
    """QED-Nano's RC agent summarizes with the solver's model unless its config names a
    ``summarizer_model`` (CMU-AIRe/QED-Nano ``eval/src/imobench/agents/reasoning_cache.py``
    :23-26), and ``eval/configs/agents/reasoning_cache.yaml`` names none: the recipe's
    ``rc`` has no summarizer of its own (an Instruct summarizer is QED-Nano's training
    config, not its evaluation's)."""
    from scaffolds.strategies.rc import RC

    strategy = build_strategy(recipe_named("qed-nano-rc").served.spec)
    assert isinstance(strategy, RC) and strategy.summarizer is None


READERS = {
    "rc": "boxed_anywhere",
    "rsa": "boxed_anywhere",
    "deepconf-low": "boxed_anywhere",
    "deepconf-high": "boxed_anywhere",
    "esc": "answer_is",
    "adaptive-consistency": "answer_is",
    "s1": "after_answer_marker",
}


@pytest.mark.parametrize(("name", "reader"), sorted(READERS.items()))
def test_each_recipe_reads_as_its_reference(name: str, reader: str) -> None:
    """README's reader paragraph: RC (IanYHWu/rc ``inference/utils/evaluators.py:13-25``),
    RSA (``eval_loop.py:345-350``) and DeepConf (``deepconf/utils.py:282-292``) read the
    last box of the whole output; ESC (``early_stop_math.py:11-68``) and
    Adaptive-Consistency (``scripts/pal/core/interface.py:85-96``) "answer is"; s1
    (``lm_eval/tasks/aime/utils.py:247-262``) after its answer marker. Each recipe's
    ``sources`` cites the reader it follows."""
    recipe = recipe_named(name)
    assert recipe.served.answer_format == reader
    assert any(f"answer_format {reader}" in source for source in recipe.sources)


def test_adaptive_recipes_treat_unanswered_samples_as_their_references_do() -> None:
    """Adaptive-Consistency's evaluation skips an empty answer before its stopping rule
    (Pranjal2041/AdaptiveConsistency ``scripts/eval_outputs.py:16-28``); ESC's window
    counts an empty prediction as one more value (Yiwei98/ESC ``early_stop_math.py``
    :136-145). Both recipes ask the solve template, the prompt file's few-shot prompt."""
    from scaffolds.strategies.adaptive import Adaptive
    from scaffolds.strategies.single import Single

    for name, rule in (("adaptive-consistency", "drop"), ("esc", "count")):
        strategy = build_strategy(recipe_named(name).served.spec)
        assert isinstance(strategy, Adaptive) and strategy.unanswered == rule
        assert isinstance(strategy.solver, Single) and strategy.solver.prompt == "solve"


def test_self_refine_and_s1_recipes_carry_their_references_step_settings() -> None:
    """Self-Refine: the first program at 0.0, the feedback (which writes the fix) at 0.7,
    the answer the last fixed program (madaan/self-refine ``src/gsm/run.py:21,27,65,104``),
    the first program from the solve template (init.txt). s1: the thinking stops at
    ``<|im_start|>`` (151644), opens in the prompt, a capped one closes with
    ``"\\nFinal Answer:"`` (``vllm_causallms.py:246-283,401-409``)."""
    from scaffolds.strategies.budget_forcing import BudgetForcing
    from scaffolds.strategies.self_refine import SelfRefine
    from scaffolds.strategies.single import Single

    refine = build_strategy(recipe_named("self-refine").served.spec)
    assert isinstance(refine, SelfRefine) and refine.answer == "refined"
    temperatures = refine.solve_temperature, refine.feedback_temperature, refine.refine_temperature
    assert temperatures == (0.0, 0.7, 0.7)
    assert isinstance(refine.solver, Single) and refine.solver.prompt == "solve"
    s1 = build_strategy(recipe_named("s1").served.spec)
    assert isinstance(s1, BudgetForcing) and s1.stop_token_id == 151644 and s1.open_thinking
    assert s1.cap_marker == "\nFinal Answer:"
