"""A command whose optional dependency is missing prints one line naming the command that
installs it and exits 2: never a traceback.

Each case runs the real ``ponder`` with the module made unimportable
(:func:`tests.ponder_command.run_ponder`'s ``missing``), as in an environment built
without the extra that brings it.
"""

from __future__ import annotations

import json
import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from scaffolds.dependencies import EXTRAS, installed
from tests.ponder_command import ROOT, error_line, run_ponder

PROBLEMS = str(ROOT / "examples" / "problems.jsonl")
ADDITION = str(ROOT / "scaffolds" / "models" / "ponder-addition")
NOWHERE = "http://127.0.0.1:9/v1"  # nothing listens: the check comes before any call
SFT = ("train", "sft", "--model", ADDITION, "--data", "{rows}", "--out", "{tmp}/sft")


def eval_argv(dataset: str = PROBLEMS) -> list[str]:
    """``ponder eval`` of ``dataset`` against a server that is not there."""
    return [
        "eval",
        "--base-url",
        NOWHERE,
        "--model",
        "m",
        "--dataset",
        dataset,
        "--out",
        "{tmp}/eval",
    ]


CASES = {
    "train sft without trl": (
        ("trl",),
        "train",
        SFT,
    ),
    "train sft without torch": (
        ("torch",),
        "train",
        SFT,
    ),
    "train grpo without trl": (
        ("trl",),
        "train",
        ["train", "grpo", "--model", ADDITION, "--data", PROBLEMS, "--out", "{tmp}/grpo"],
    ),
    "train verifier without peft": (
        ("peft",),
        "train",
        [
            "train",
            "verifier",
            "--model",
            ADDITION,
            "--results",
            "{rows}",
            "--problems",
            PROBLEMS,
            "--out",
            "{tmp}/verifier",
        ],
    ),
    "train verl without datasets": (
        ("datasets",),
        "train",
        ["train", "verl", "--data", PROBLEMS, "--out", "{tmp}/verl"],
    ),
    "train data on a local engine without torch": (
        ("torch",),
        "local",
        ["train", "data", "{tmp}/run", "--dataset", PROBLEMS, "--engine", f"local:{ADDITION}"],
    ),
    "train data on an in-process vLLM without vllm": (
        ("vllm",),
        "vllm",
        ["train", "data", "{tmp}/run", "--dataset", PROBLEMS, "--engine", f"vllm:{ADDITION}"],
    ),
    "eval without openai": (
        ("openai",),
        "eval",
        eval_argv(),
    ),
    "eval without matplotlib": (
        ("matplotlib",),
        "eval",
        eval_argv(),
    ),
    "eval of a Hub dataset without datasets": (
        ("datasets",),
        "hub",
        eval_argv("someone/some-dataset"),
    ),
    "serve without the server extra": (
        ("fastapi",),
        "server",
        ["serve", "--engine", NOWHERE, "--model", "m"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_missing_dependency_is_one_line_naming_its_install_command(
    case: str, tmp_path: Path
) -> None:
    missing, extra, args = CASES[case]
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": "1+1=", "completion": "2"}) + "\n")
    argv = [a.format(tmp=tmp_path, rows=rows) for a in args]
    done = run_ponder(argv, missing=missing)
    line = error_line(done, 2)
    assert len(done.stderr.splitlines()) == 1, done.stderr
    install = f"pip install -e '.[{extra}]'"
    assert line.startswith("error: ") and line.endswith(install), line
    assert f"needs {missing[0]}," in line


@pytest.mark.parametrize(
    ("missing", "extra", "engine", "verifier"),
    [
        ("torch", "local", f"local:{ADDITION}", None),
        ("vllm", "vllm", f"vllm:{ADDITION}", None),
        ("transformers", "local", NOWHERE, f"local:{ADDITION}"),
    ],
)
def test_serve_with_an_in_process_engine_or_verifier_it_cannot_import(
    missing: str, extra: str, engine: str, verifier: str | None
) -> None:
    args = ["serve", "--engine", engine, "--model", "m", "--host", "127.0.0.1", "--port", "0"]
    done = run_ponder([*args, *(["--verifier", verifier] if verifier else [])], missing=[missing])
    last = error_line(done, 2)
    assert f"needs {missing}, which is not installed: pip install -e '.[{extra}]'" in last


def _extra_distributions(extra: str, extras: dict[str, list[str]]) -> set[str]:
    names: set[str] = set()
    for requirement in extras[extra]:
        name = re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower()
        if name == "ponder":  # ponder[local]: that extra's distributions too
            inner = requirement.split("[", 1)[1].split("]", 1)[0]
            names |= _extra_distributions(inner, extras)
        else:
            names.add(name.replace("_", "-"))
    return names


def test_each_extras_modules_come_from_that_extras_distributions() -> None:
    """The table the messages are made from agrees with pyproject.toml (for each module
    installed here, the development venv has every extra but vLLM)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    providers = packages_distributions()
    for extra in EXTRAS.values():
        listed = _extra_distributions(extra.name, extras)
        for module in extra.modules:
            if not installed(module):
                continue
            found = {d.lower().replace("_", "-") for d in providers.get(module, [])}
            assert found & listed, (extra.name, module, found, listed)


def test_preparing_an_adapter_model_without_torch(tmp_path: Path) -> None:
    """``ponder models prepare`` of a shipped adapter merges it into its base with torch:
    without it, one line and exit 2 (the base is the prepared one, linked in)."""
    from scaffolds.models import model_status

    base = model_status("smollm2-135m-instruct")
    if not base.ready:
        pytest.skip("smollm2-135m-instruct is not prepared here")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "smollm2-135m-instruct").symlink_to(base.path)
    done = run_ponder(
        ["models", "prepare", "smollm2-135m-gsr"],
        missing=["torch"],
        env={"PONDER_HOME": str(tmp_path)},
    )
    assert error_line(done, 2) == (
        "error: merging a LoRA adapter into its base needs torch, which is not installed: "
        "pip install -e '.[local]'"
    )


@pytest.mark.parametrize(
    ("name", "missing"),
    [
        ("smollm2-135m-instruct", "torch"),
        ("smollm2-135m-instruct", "transformers"),
        ("smollm2-135m-instruct", "gguf"),
        ("smollm2-135m-instruct", "accelerate"),  # transformers' GGUF loader needs it
        ("smollm2-135m-gsr", "torch"),  # an adapter on it: its base is prepared first
    ],
)
def test_preparing_the_gguf_model_without_the_local_extra(
    name: str, missing: str, tmp_path: Path
) -> None:
    """``ponder models prepare smollm2-135m-instruct`` converts a GGUF with the ``local``
    extra: without one of its modules, one line naming the install command and exit 2,
    as every other missing dependency (it was a "not ready" error, exit 1)."""
    done = run_ponder(
        ["models", "prepare", name],
        missing=[missing],
        env={"PONDER_HOME": str(tmp_path)},
    )
    assert error_line(done, 2) == (
        f"error: preparing smollm2-135m-instruct needs {missing}, which is not installed: "
        "pip install -e '.[local]'"
    )
    assert not (tmp_path / "models" / "smollm2-135m-instruct").exists()
