"""The verl agent-loop adapter, against a stand-in for verl's server manager and a
stand-in ``verl`` module that follows verl 0.9.1's API (verl itself needs its own
environment; test_training_verl_real.py runs the adapter against the real one)."""

from __future__ import annotations

import asyncio
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from scaffolds.spec.registry import get_prompt_set
from training import verl_loop
from training.verl_loop import LoopSettings, PlanCache, compute_score, run_scaffold_step

DEFAULT = get_prompt_set("default")


class FakeServerManager:
    """verl's ``AsyncLLMServerManager.generate``: token ids in, a TokenOutput out."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.calls: list[dict[str, Any]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any]
    ) -> Any:
        self.calls.append({"id": request_id, "prompt_ids": prompt_ids, **sampling_params})
        await asyncio.sleep(0)
        prompt = self.tokenizer.decode(prompt_ids)
        text = "so 3+4=7" if "Candidate" in prompt else "8"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [
            self.tokenizer.eos_token_id
        ]
        return SimpleNamespace(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")


@pytest.fixture
def tokenizer(tiny_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


ROW = {
    "raw_prompt": [{"role": "user", "content": "What is 3+4?"}],
    "reward_model": {"ground_truth": "7"},
    "extra_info": {"index": 5, "mode": "gsr_refine"},
    "uid": "group-1",
}


def test_a_group_shares_one_planned_context(tokenizer: Any) -> None:
    server = FakeServerManager(tokenizer)
    plans = PlanCache(uses=3)
    settings = LoopSettings(num_candidates=2, context_max_tokens=16)

    async def group() -> list[dict[str, Any]]:
        return await asyncio.gather(
            *(
                run_scaffold_step(
                    server,
                    tokenizer,
                    {"temperature": 1.0, "top_p": 1.0},
                    ROW,
                    settings=settings,
                    response_length=32,
                    plans=plans,
                )
                for _ in range(3)
            )
        )

    outputs = asyncio.run(group())
    assert len(server.calls) == 2 + 3  # 2 candidates once, then one call per sample
    assert [c["max_tokens"] for c in server.calls] == [16, 16, 32, 32, 32]
    assert all(c["logprobs"] is True and c["temperature"] == 1.0 for c in server.calls)
    assert len(plans) == 0  # forgotten once the group used it
    refine = DEFAULT.template("gsr_refine").render(
        problem="What is 3+4?", candidates=DEFAULT.candidates(["8", "8"]), count="2"
    )
    expected_prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": refine}], add_generation_prompt=True, tokenize=True
    )
    if isinstance(expected_prompt, dict) or hasattr(expected_prompt, "input_ids"):
        expected_prompt = expected_prompt["input_ids"]
    for out in outputs:
        assert out["prompt_ids"] == list(expected_prompt)
        assert tokenizer.decode(out["response_ids"], skip_special_tokens=True) == "so 3+4=7"
        assert out["response_mask"] == [1] * len(out["response_ids"])
        assert out["response_logprobs"] == [-0.5] * len(out["response_ids"])
        assert out["reward_score"] == 1.0
        assert out["extra_fields"] == {"ponder_mode": "gsr_refine", "ponder_step_kind": "refine"}


def test_stored_context_and_no_reward(tokenizer: Any) -> None:
    server = FakeServerManager(tokenizer)
    row = {
        "raw_prompt": [{"role": "user", "content": "What is 3+4?"}],
        "mode": "rc_continue",
        "extra_info": {"summary": "I added 3 and 4."},
    }
    out = asyncio.run(
        run_scaffold_step(server, tokenizer, {}, row, settings=LoopSettings(reward="none"))
    )
    assert len(server.calls) == 1
    text = DEFAULT.template("rc_reasoning_continue").render(
        problem="What is 3+4?", summary="I added 3 and 4."
    )
    assert text in tokenizer.decode(out["prompt_ids"])
    assert out["reward_score"] is None
    with pytest.raises(ValueError, match="unknown rollout mode"):
        asyncio.run(run_scaffold_step(server, tokenizer, {}, {**row, "mode": "bad"}))


def test_verls_prompt_length_and_chat_template_kwargs(tokenizer: Any) -> None:
    """A prompt longer than ``rollout.prompt_length`` is cut before sampling (verl pads
    every prompt to that width), and ``data.apply_chat_template_kwargs`` reach the
    template; both were found running the loop in a real verl."""
    server = FakeServerManager(tokenizer)
    tokenizer.chat_template = (
        "{% if not thinking %}/no_think\n{% endif %}" + tokenizer.chat_template
    )
    row = {"raw_prompt": ROW["raw_prompt"], "mode": "gsr_refine", "candidates": ["6", "8"]}

    def step(prompt_length: int | None) -> dict[str, Any]:
        return asyncio.run(
            run_scaffold_step(
                server,
                tokenizer,
                {},
                row,
                prompt_length=prompt_length,
                chat_template_kwargs={"thinking": False},
            )
        )

    full = step(None)["prompt_ids"]
    assert tokenizer.decode(full).startswith("/no_think\n")
    cut = step(40)
    assert cut["prompt_ids"] == full[-40:] == server.calls[-1]["prompt_ids"]  # sampled as returned


class DictConfigWrap:
    """verl's wrapper that keeps Hydra from resolving the trainer config."""

    def __init__(self, config: Any) -> None:
        self.config = config


def install_fake_verl(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A ``verl.experimental.agent_loop.agent_loop`` with verl 0.9.1's signatures."""
    registry: dict[str, Any] = {}

    class AgentLoopBase:
        def __init__(
            self,
            trainer_config: DictConfigWrap,
            server_manager: Any,
            tokenizer: Any,
            processor: Any,
            dataset_cls: Any,
            data_config: DictConfigWrap,
            hf_model_type: str | None = None,
            **kwargs: Any,
        ) -> None:
            self.config = trainer_config.config
            self.rollout_config = self.config.actor_rollout_ref.rollout
            self.server_manager = server_manager
            self.tokenizer = tokenizer
            self.processor = processor
            self.data_config = data_config.config
            self.apply_chat_template_kwargs = self.data_config.get("apply_chat_template_kwargs", {})

    class AgentLoopOutput:
        """verl's is a pydantic model; these fields have no default there."""

        def __init__(self, **fields: Any) -> None:
            missing = {"prompt_ids", "response_ids", "response_mask", "metrics"} - set(fields)
            assert not missing, f"AgentLoopOutput needs {missing}"
            self.__dict__.update(fields)

    def register(name: str) -> Any:
        def decorator(cls: type) -> type:
            registry[name] = {"_target_": f"{cls.__module__}.{cls.__qualname__}"}
            return cls

        return decorator

    names = ["verl", "verl.experimental", "verl.experimental.agent_loop"]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    module = types.ModuleType("verl.experimental.agent_loop.agent_loop")
    module.AgentLoopBase = AgentLoopBase  # type: ignore[attr-defined]
    module.AgentLoopOutput = AgentLoopOutput  # type: ignore[attr-defined]
    module.register = register  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(verl_loop, "_LOOP_CLASS", None)
    return registry


def test_agent_loop_class_with_a_stand_in_verl(
    tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = install_fake_verl(monkeypatch)
    cls = verl_loop.PonderScaffoldAgentLoop  # built on first lookup
    assert registry == {
        "ponder_scaffold": {"_target_": "training.verl_loop.PonderScaffoldAgentLoop"}
    }
    rollout = SimpleNamespace(response_length=24, prompt_length=512, n=1)
    config = SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=rollout))
    server = FakeServerManager(tokenizer)
    loop = cls(  # as verl's AgentLoopWorker instantiates it, plus the YAML's settings
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=None,
        data_config=DictConfigWrap({}),
        hf_model_type="qwen2",
        tools=None,
        name="ponder_scaffold",
        mode="gsr_refine",
        num_candidates=2,
        reward="none",
    )
    assert loop.settings.mode == "gsr_refine" and loop.response_length == 24
    assert loop.prompt_length == 512
    row = {"raw_prompt": [{"role": "user", "content": "What is 3+4?"}], "index": 1}
    output = asyncio.run(loop.run({"temperature": 0.7}, **row))
    assert tokenizer.decode(output.response_ids, skip_special_tokens=True) == "so 3+4=7"
    assert output.num_turns == 2 and output.reward_score is None
    assert len(server.calls) == 3


def test_without_verl_the_error_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "verl", None)
    monkeypatch.setattr(verl_loop, "_LOOP_CLASS", None)
    with pytest.raises(ImportError, match="own environment"):
        verl_loop.agent_loop_class()
    with pytest.raises(AttributeError):
        verl_loop.NotAThing  # noqa: B018


def test_reward_function_and_yaml(tmp_path: Path) -> None:
    assert compute_score("x", "thus \\boxed{\\frac{1}{2}}", "0.5") == 1.0
    assert compute_score("x", "thus \\boxed{2}", 3) == 0.0
    path = verl_loop.write_agent_loop_config(tmp_path / "loop.yaml", mode="rc_continue")
    text = path.read_text()
    assert text.startswith("- name: ponder_scaffold\n  _target_: training.verl_loop.")
    assert '  mode: "rc_continue"' in text and "  context_max_tokens: null" in text


def test_plan_cache_forgets_failures() -> None:
    cache = PlanCache(uses=2)
    calls = 0

    async def boom() -> Any:
        nonlocal calls
        calls += 1
        raise RuntimeError("no")

    async def go() -> None:
        for _ in range(2):
            with pytest.raises(RuntimeError):
                await cache.get("k", boom)

    asyncio.run(go())
    assert calls == 2 and len(cache) == 0


def test_how_a_verl_sample_ended_is_read_from_its_tokens(tokenizer: Any) -> None:
    """verl's ``stop_reason`` is "completed" at a stop and at the length cap alike: the
    end-of-sequence id, a requested stop string (sent to verl) and ``max_tokens`` tell
    them apart, and ``stop_matched`` says which stop it was."""
    from scaffolds.engines.protocol import GenerateRequest, SamplingParams
    from training.verl_engine import VerlServerEngine

    eos = tokenizer.eos_token_id

    class Scripted:
        def __init__(self, ids: list[int], reason: str | None) -> None:
            self.out = SimpleNamespace(
                token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason=reason
            )
            self.sent: dict[str, Any] = {}

        async def generate(self, request_id: str, **call: Any) -> Any:
            self.sent = call["sampling_params"]
            return self.out

    def sample(text: str, reason: str | None, end: list[int], **params: Any) -> tuple[Any, Any]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + end
        server = Scripted(ids, reason)
        engine = VerlServerEngine(server, tokenizer, {"temperature": 1.0})
        request = GenerateRequest("1+1=", SamplingParams(**params))
        [completion] = asyncio.run(engine.generate(request)).completions
        return completion, server.sent

    # "2" then the end-of-sequence id: 2 tokens, a stop at the EOS
    done, sent = sample("2", "completed", [eos], max_tokens=8)
    assert (done.text, done.finish_reason, done.stop_matched) == ("2", "stop", False)
    assert done.ended_at_eos and done.completion_tokens == 2 and "stop" not in sent
    # "ab\n\nc": 5 characters, 5 tokens; the step separator matched after "ab"
    step, sent = sample("ab\n\nc", "completed", [], stop=("\n\n",), max_tokens=8)
    assert (step.text, step.finish_reason, step.stop_matched) == ("ab", "stop", True)
    assert not step.ended_at_eos and step.completion_tokens == 5 and sent["stop"] == ["\n\n"]
    # "abc" with max_tokens 3: verl says "completed", but the cap cut it
    cut, _ = sample("abc", "completed", [], max_tokens=3)
    assert (cut.text, cut.finish_reason, cut.stop_matched) == ("abc", "length", False)
    # 3 tokens under a cap of 8 and no EOS id: another stop token ended it (as vLLM's
    # server reports a stop token id), also with verl's SGLang server's None
    for reason in ("completed", None):
        other, _ = sample("abc", reason, [], max_tokens=8)
        assert (other.finish_reason, other.stop_matched) == ("stop", False)
    aborted, _ = sample("ab", "aborted", [], max_tokens=8)
    assert (aborted.finish_reason, aborted.stop_matched) == ("abort", None)
