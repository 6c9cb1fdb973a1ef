"""A LoRA adapter on a known model: merged weights equal peft's base + adapter, registered
by ``ponder models prepare NAME --adapter DIR``, and served by the embedded default.

The base is the shipped ``ponder-addition`` (always ready); the adapters are made here
with peft, with random ``B`` matrices so that they change the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from typer.testing import CliRunner

from clients.models_cli import models_app
from scaffolds.models import get_model, known_models, model_path, model_status
from scaffolds.models.adapters import ADAPTER_INFO, merge_lora
from scaffolds.models.known import ModelPreparationError
from scaffolds.models.prepare import prepare_model

pytest.importorskip("peft")
BASE = "ponder-addition"
PROMPT = "347+589="


def make_adapter(target: Path, *, seed: int = 0, targets: Any = "all-linear") -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_path(BASE), dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=targets, task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, config)
    for name, param in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.05)
    peft_model.save_pretrained(str(target))
    return target


def _logits(model: Any) -> Any:
    import torch
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(model_path(BASE))(PROMPT, return_tensors="pt")
    with torch.no_grad():
        return model(**ids).logits[0]


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_adapter(tmp_path_factory.mktemp("adapter") / "lora")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PONDER_HOME", str(tmp_path))
    return tmp_path / "models"


def test_merged_weights_give_peft_logits(adapter: Path, tmp_path: Path) -> None:
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    def base() -> Any:
        return AutoModelForCausalLM.from_pretrained(model_path(BASE), dtype=torch.float32)

    heard: list[str] = []
    merge_lora(model_path(BASE), adapter, tmp_path / "merged", heard.append)
    merged = _logits(AutoModelForCausalLM.from_pretrained(tmp_path / "merged"))
    with_adapter = _logits(PeftModel.from_pretrained(base(), adapter))
    plain = _logits(base())
    assert torch.allclose(merged, with_adapter, atol=1e-4, rtol=1e-4)
    assert (merged - plain).abs().max() > 0.05  # the adapter matters, so the check can fail
    layers = sum(
        k.endswith("lora_A.weight") for k in load_file(adapter / "adapter_model.safetensors")
    )
    assert layers == 4 * 7 and f"merged {layers} layers; writing {tmp_path / 'merged'}" in heard
    assert (tmp_path / "merged" / "tokenizer_config.json").exists()


def test_an_adapter_that_merging_cannot_honour_is_refused(adapter: Path, tmp_path: Path) -> None:
    bad = tmp_path / "dora"
    bad.mkdir()
    config = json.loads((adapter / "adapter_config.json").read_text())
    (bad / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(ModelPreparationError, match="use_dora"):
        merge_lora(model_path(BASE), bad, tmp_path / "out", lambda _: None)


def _prepare(*args: str) -> Any:
    return CliRunner().invoke(models_app, ["prepare", *args])


def test_prepare_with_an_adapter_registers_merges_and_lists_it(
    adapter: Path, home: Path, tmp_path: Path
) -> None:
    result = _prepare("addition-lora", "--adapter", str(adapter))  # base read from the adapter
    assert result.exit_code == 0, result.output
    folder = Path(result.stdout.strip().splitlines()[-1])
    assert folder == home / "addition-lora" and (folder / "PREPARED.json").exists()
    model = get_model("addition-lora")
    base = get_model(BASE)
    assert (model.base, model.prompts, dict(model.aliases)) == (BASE, "compact", base.aliases)
    assert model_status(model).ready
    info = json.loads((home / "adapters" / "addition-lora" / ADAPTER_INFO).read_text())
    assert info == {"name": "addition-lora", "base": BASE, "prompts": "compact"}

    again = _prepare("addition-lora", "--adapter", str(adapter))  # the same adapter: no-op
    assert again.exit_code == 0 and Path(again.stdout.strip().splitlines()[-1]) == folder
    other = make_adapter(tmp_path / "other", seed=1, targets=["q_proj"])
    taken = _prepare("addition-lora", "--adapter", str(other))
    assert taken.exit_code == 1 and "registered already" in taken.output
    builtin = _prepare(BASE, "--adapter", str(other))
    assert builtin.exit_code == 1 and "known model already" in builtin.output
    assert [m.name for m in known_models()][-1] == "addition-lora"


def test_a_replaced_adapter_is_merged_again(adapter: Path, home: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    assert _prepare("addition-lora", "--adapter", str(adapter)).exit_code == 0
    folder = model_path("addition-lora")
    before = _logits(AutoModelForCausalLM.from_pretrained(folder))
    other = make_adapter(tmp_path / "other", seed=1)
    replaced = _prepare("addition-lora", "--adapter", str(other), "--replace")
    assert replaced.exit_code == 0, replaced.output
    assert Path(replaced.stdout.strip().splitlines()[-1]) == folder
    after = _logits(AutoModelForCausalLM.from_pretrained(folder))
    assert (after - before).abs().max() > 0.05  # the merged weights are the new adapter's
    stored = home / "adapters" / "addition-lora" / "adapter_model.safetensors"
    assert stored.read_bytes() == (other / "adapter_model.safetensors").read_bytes()
    assert not list((home / "adapters").glob(".*"))  # no partial or replaced folder left

    # a merged folder left from an older adapter is stale: not ready until prepared again
    stored.write_bytes((adapter / "adapter_model.safetensors").read_bytes())
    status = model_status("addition-lora")
    assert not status.ready and "another source" in status.detail
    assert prepare_model("addition-lora") == folder and model_status("addition-lora").ready
    torch.testing.assert_close(
        _logits(AutoModelForCausalLM.from_pretrained(folder)), before, atol=1e-5, rtol=1e-5
    )


def test_the_embedded_default_serves_an_adapter_beside_its_base(adapter: Path, home: Path) -> None:
    from server.pool import embedded
    from server.settings import Settings
    from testing.ponder import running_ponder

    assert _prepare("addition-lora", "--adapter", str(adapter)).exit_code == 0
    heard: list[str] = []
    served = Settings(embedded_engine="transformers", embedded_models=(BASE, "addition-lora"))
    with embedded.embedded_default(served, heard.append) as s:
        names = [m.name for m in s.served_models()]
        assert names == [BASE, "addition-lora"]
        with running_ponder(s) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            ids = [m.id for m in client.models.list().data]
            reply = client.chat.completions.create(
                model="addition-lora",
                messages=[{"role": "user", "content": PROMPT}],
                temperature=0.0,
            )
    assert "addition-lora" in ids and "addition-lora+maj8" in ids
    assert reply.choices[0].message.content is not None
    assert reply.usage is not None and reply.usage.completion_tokens >= 1
    assert prepare_model("addition-lora") == home / "addition-lora"


def test_a_verifier_adapter_is_its_models_verifier_not_a_chat_model(
    adapter: Path, home: Path
) -> None:
    """An adapter whose ``ponder_adapter.json`` says ``verifies`` (as the shipped
    ``smollm2-135m-verifier`` does) is prepared at start and named as that model's
    verifier by the embedded default; it is not served as a model of its own."""
    import shutil

    from server.pool import embedded
    from server.settings import Settings

    folder = home / "adapters" / "addition-judge"
    shutil.copytree(adapter, folder)
    info = {"name": "addition-judge", "base": BASE, "verifies": BASE}
    (folder / ADAPTER_INFO).write_text(json.dumps(info))
    only_base = Settings(embedded_engine="transformers", embedded_models=(BASE,))
    with embedded.embedded_default(only_base, print) as s:
        served = s.served_models()
    assert [m.name for m in served] == [BASE]
    assert served[0].verifier == f"local:{home / 'addition-judge'}"
    assert (home / "addition-judge" / "config.json").exists()  # merged before any request
