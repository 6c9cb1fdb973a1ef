"""The character tokenizer: every compact prompt round-trips, and chat equals plain text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaffolds.spec.registry import get_prompt_set

pytest.importorskip("transformers")

from experiments.tiny_models.tokenizer import ALPHABET, CHAT_TEMPLATE, build_tokenizer


def _compact_prompts() -> list[str]:
    """Every compact template, rendered with addition-task values."""
    prompts = get_prompt_set("compact")
    fields = {
        "problem": "347+589=",
        "candidates": prompts.candidates(["936", "926", "1036"]),
        "summary": "936",
        "attempt": "926",
        "solution": "936",
        "feedback": prompts.text("self_refine_correct_marker"),
        "abstraction": "9+9=18",
        "count": "3",
        "index": "1",
        "text": "936",
        "history": "926",
    }
    return [template.render(**fields) for template in prompts.templates.values()]


def test_tokenizer_round_trips_every_compact_prompt() -> None:
    tokenizer = build_tokenizer()
    rendered = _compact_prompts()
    assert "347+589=[936,926,1036]" in rendered
    for text in rendered:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text)  # one token per character
        assert tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids) == text


def test_tokenizer_special_tokens_and_no_bos() -> None:
    tokenizer = build_tokenizer()
    assert tokenizer.bos_token is None
    assert tokenizer.eos_token == "<eos>" and tokenizer.pad_token == "<pad>"
    ids = tokenizer("12+3=")["input_ids"]
    assert ids == tokenizer("12+3=", add_special_tokens=False)["input_ids"]
    answer = [*tokenizer("15", add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    assert tokenizer.decode(answer, skip_special_tokens=True) == "15"
    assert len(tokenizer) == 3 + len(ALPHABET)


def test_tokenizer_chat_template_renders_the_plain_prompt() -> None:
    tokenizer = build_tokenizer()

    def render(messages: list[dict[str, str]]) -> str:
        return str(
            tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        )

    assert render([{"role": "user", "content": "347+589="}]) == "347+589="
    assert (
        render([{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+2="}])
        == "1+2="
    )
    # A forced answer: prompt, the cut reply, then the cue, exactly as the text form glues them.
    forced = [
        {"role": "user", "content": "1+2="},
        {"role": "assistant", "content": "3"},
        {"role": "user", "content": "="},
    ]
    assert render(forced) == "1+2=" + "3" + "="


def test_tokenizer_saved_files_reload_identically(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    build_tokenizer().save_pretrained(str(tmp_path))
    loaded = AutoTokenizer.from_pretrained(str(tmp_path))
    text = "347+589=[936,926]"
    assert loaded(text)["input_ids"] == build_tokenizer()(text)["input_ids"]
    assert loaded.chat_template == CHAT_TEMPLATE


def test_shipped_model_uses_this_tokenizer(shipped_model_dir: Path) -> None:
    shipped = json.loads((shipped_model_dir / "tokenizer.json").read_text())["model"]["vocab"]
    built = json.loads(build_tokenizer().backend_tokenizer.to_str())["model"]["vocab"]
    assert shipped == built
    config = json.loads((shipped_model_dir / "config.json").read_text())
    assert config["vocab_size"] == len(build_tokenizer())
    assert config["head_dim"] == 32  # vLLM's CPU attention supports it


def test_the_thinking_tokenizer_keeps_its_markers_whole_and_in_decoded_text() -> None:
    from experiments.tiny_models.think_train import completion, tokens
    from scaffolds.evaluation.addition_task import AdditionProblem

    tokenizer = build_tokenizer(thinking=True)
    text = "347+589=" + completion(AdditionProblem(347, 589))
    ids = tokenizer(text)["input_ids"]
    assert ids == tokens(text) and len(ids) == len("347+589=16 13 9936") + 2
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    vocab = tokenizer.get_vocab()
    assert {"<think>", "</think>"} <= set(vocab) and len(vocab) == len(ALPHABET) + 5
    off = tokenizer.apply_chat_template(
        [{"role": "user", "content": "1+2="}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=False,
    )
    assert off == "1+2=<think></think>"
    assert (
        build_tokenizer().apply_chat_template(
            [{"role": "user", "content": "1+2="}],
            tokenize=False,
            add_generation_prompt=True,
            enable_thinking=False,
        )
        == "1+2="
    )
