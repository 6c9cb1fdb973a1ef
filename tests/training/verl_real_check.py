"""Ponder's verl agent loop against a real verl install (run inside verl's environment).

verl pins its own transformers, so it cannot share Ponder's environment; this script runs
in a separate one (see training/README.md, "Multi-node: verl")::

    PYTHONPATH=. .cache/verl-venv/bin/python -m tests.training.verl_real_check

It needs no GPU, network or model download: the tokenizer and model config come from the
tiny offline model of ``tests/training/tiny_model.py``, and the only stand-in is the LLM
server client (verl's rollout servers need vLLM or SGLang on a GPU), which answers with
verl's real ``TokenOutput``. Everything else is verl's own code:

1. ``agent_loop_class()`` subclasses verl's ``AgentLoopBase`` and registers with verl's
   agent-loop registry; the loop is built from the YAML that
   ``write_agent_loop_config`` writes, through ``hydra.utils.instantiate`` with the
   arguments verl's ``AgentLoopWorker`` passes;
2. one ``await loop.run(...)`` and one group of ``n`` samples sharing one plan;
3. a real ``AgentLoopWorker`` (built from verl's composed ``ppo_trainer`` config) runs
   ``generate_sequences`` on a batch of two groups, through verl's padding and batching
   into a ``DataProto``;
4. the same batch through that worker as a Ray actor on a local Ray instance, as
   verl's ``AgentLoopManager`` runs it.

It prints one line ``REPORT {json}`` (the checks, what they saw, and the traceback if a
step raised) and exits 1 if any check failed; ``test_training_verl_real.py`` runs it as a
child process and reads that line.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
AGENT_NAME = "ponder_scaffold"
PROMPT_LENGTH = 256
"""verl's ``rollout.prompt_length``: long enough for a direct prompt, too short for the
tiny model's character-level refine prompt, so the check also covers truncation."""
RESPONSE_LENGTH = 32
GROUP_SIZE = 3
"""verl's ``rollout.n``: samples per prompt, which share one planned context."""
QUESTION = [{"role": "user", "content": "What is 3+4?"}]
NO_THINK_TEMPLATE = (
    "{% if enable_thinking is defined and not enable_thinking %}/no_think\n{% endif %}"
)
"""Prepended to the tiny chat template, so a prompt shows whether verl's
``data.apply_chat_template_kwargs`` reached the tokenizer."""


class StandInServerManager:
    """verl's ``LLMServerClient.generate``: token ids in, verl's real ``TokenOutput`` out.

    A refine prompt (its instructions ask for a better solution, and survive left
    truncation) is answered ``so 3+4=7``, any other ``8``; each call is recorded with
    its prompt ids and sampling parameters.
    """

    def __init__(self, tokenizer: Any, token_output: type) -> None:
        self.tokenizer = tokenizer
        self.token_output = token_output
        self.calls: list[dict[str, Any]] = []

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        **kwargs: Any,
    ) -> Any:
        self.calls.append(
            {"request_id": request_id, "prompt_ids": list(prompt_ids), **sampling_params}
        )
        await asyncio.sleep(0)
        prompt = self.tokenizer.decode(prompt_ids)
        text = "so 3+4=7" if "solution" in prompt else "8"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = [*ids, self.tokenizer.eos_token_id]
        return self.token_output(
            token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed"
        )


def verl_sampling_params(rollout: Any) -> dict[str, Any]:
    """The sampling parameters ``AgentLoopWorker.generate_sequences`` hands each loop."""
    return {
        "temperature": rollout.temperature,
        "top_p": rollout.top_p,
        "top_k": rollout.top_k,
        "repetition_penalty": 1.0,
        "logprobs": rollout.calculate_log_probs,
    }


def compose_trainer_config(model_dir: Path, agent_loop_yaml: Path) -> Any:
    """verl's own ``ppo_trainer`` config, composed by Hydra as ``main_ppo`` does."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(
            config_name="ppo_trainer",
            overrides=[
                "algorithm.adv_estimator=grpo",
                f"actor_rollout_ref.model.path={model_dir}",
                "actor_rollout_ref.rollout.name=vllm",
                "actor_rollout_ref.rollout.mode=async",
                f"actor_rollout_ref.rollout.prompt_length={PROMPT_LENGTH}",
                f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
                f"actor_rollout_ref.rollout.n={GROUP_SIZE}",
                "actor_rollout_ref.rollout.calculate_log_probs=True",
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path={agent_loop_yaml}",
                "+data.apply_chat_template_kwargs.enable_thinking=false",
            ],
        )


def output_summary(output: Any, tokenizer: Any) -> dict[str, Any]:
    """What one ``AgentLoopOutput`` holds, by length and value."""
    return {
        "type": f"{type(output).__module__}.{type(output).__qualname__}",
        "prompt_ids": len(output.prompt_ids),
        "response_ids": len(output.response_ids),
        "response_mask": len(output.response_mask),
        "mask_sum": sum(output.response_mask),
        "response_logprobs": None
        if output.response_logprobs is None
        else len(output.response_logprobs),
        "response_text": tokenizer.decode(output.response_ids, skip_special_tokens=True),
        "reward_score": output.reward_score,
        "num_turns": output.num_turns,
        "extra_fields": dict(output.extra_fields),
    }


def lengths_consistent(output: Any) -> bool:
    """Response ids, mask and log-probs agree and fit verl's response and prompt widths."""
    n = len(output.response_ids)
    logprobs = output.response_logprobs
    return (
        0 < n <= RESPONSE_LENGTH
        and len(output.response_mask) == n
        and (logprobs is None or len(logprobs) == n)
        and 0 < len(output.prompt_ids) <= PROMPT_LENGTH
    )


def object_column(values: list[Any]) -> Any:
    """A ``non_tensor_batch`` column: a numpy object array, one element per row."""
    import numpy as np

    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


async def check(model_dir: Path, work_dir: Path, report: dict[str, Any]) -> None:
    """Run the checks, filling ``report`` as they go (so a crash keeps what was seen)."""
    import hydra
    import torch
    import transformers
    import verl
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop import agent_loop as verl_agent_loop
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.workers.rollout.replica import TokenOutput

    from training import verl_loop

    checks: dict[str, bool] = report["checks"]
    report["versions"] = {
        "verl": verl.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
    }

    # 1. The class: verl's base, verl's registry, verl's way of building it.
    loop_class: Any = verl_loop.agent_loop_class()
    registry_entry = dict(verl_agent_loop._agent_loop_registry.get(AGENT_NAME, {}))
    report["registry"] = {"name": AGENT_NAME, "entry": registry_entry}
    checks["subclasses_verl_AgentLoopBase"] = issubclass(loop_class, verl_agent_loop.AgentLoopBase)
    checks["registered_in_verl_registry"] = (
        registry_entry.get("_target_") == "training.verl_loop.PonderScaffoldAgentLoop"
    )

    agent_loop_yaml = verl_loop.write_agent_loop_config(
        work_dir / "agent_loop.yaml", mode="gsr_refine", num_candidates=2, context_max_tokens=16
    )
    config = compose_trainer_config(model_dir, agent_loop_yaml)
    rollout = config.actor_rollout_ref.rollout
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    tokenizer.chat_template = NO_THINK_TEMPLATE + tokenizer.chat_template
    server = StandInServerManager(tokenizer, TokenOutput)
    [yaml_entry] = OmegaConf.load(agent_loop_yaml)

    def build_loop() -> Any:
        """As ``AgentLoopWorker._run_agent_loop`` does, once per sample."""
        return hydra.utils.instantiate(
            config=yaml_entry,
            trainer_config=verl_agent_loop.DictConfigWrap(config=config),
            server_manager=server,
            tokenizer=tokenizer,
            processor=None,
            hf_model_type="qwen2",
            dataset_cls=RLHFDataset,
            data_config=verl_agent_loop.DictConfigWrap(config.data),
            tools=verl_agent_loop.ToolListWrap([]),
        )

    loop = build_loop()
    checks["yaml_instantiates_the_class"] = type(loop) is loop_class
    checks["loop_settings_from_yaml"] = (
        loop.settings.mode == "gsr_refine"
        and loop.settings.num_candidates == 2
        and loop.response_length == RESPONSE_LENGTH
        and loop.prompt_length == PROMPT_LENGTH
    )
    sampling_params = verl_sampling_params(rollout)

    # 2a. One sample of a direct-mode row: one server call, the reward scored here.
    row = {
        "raw_prompt": QUESTION,
        "agent_name": AGENT_NAME,
        "uid": "single",
        "index": 0,
        "reward_model": {"ground_truth": "8"},
        "extra_info": {"index": 0, "mode": "direct"},
    }
    output = await loop.run(dict(sampling_params), **row)
    single = output_summary(output, tokenizer)
    single["server_calls"] = len(server.calls)
    report["single"] = single
    checks["single_returns_verl_AgentLoopOutput"] = isinstance(
        output, verl_agent_loop.AgentLoopOutput
    )
    checks["single_lengths_consistent"] = lengths_consistent(output)
    checks["single_prompt_is_what_was_sampled"] = (
        len(server.calls) == 1 and server.calls[0]["prompt_ids"] == output.prompt_ids
    )
    prompt_text = str(tokenizer.decode(output.prompt_ids))
    checks["single_chat_template_kwargs_applied"] = prompt_text.startswith("/no_think\n")
    checks["single_reward_scored"] = output.reward_score == 1.0
    checks["single_sampling_params_passed"] = (
        all(server.calls[0][key] == value for key, value in sampling_params.items())
        and server.calls[0]["max_tokens"] == RESPONSE_LENGTH
    )
    as_dict = output.as_dict()
    checks["single_as_dict_tensors"] = (
        tuple(as_dict["responses"].shape) == (len(output.response_ids),)
        and "rollout_log_probs" in as_dict
        and "rm_scores" in as_dict
    )

    # 2b. A group of n samples of a gsr_refine row: one plan (2 candidate calls), n samples.
    server.calls.clear()
    group_row = {
        "raw_prompt": QUESTION,
        "agent_name": AGENT_NAME,
        "uid": "group-1",
        "index": 1,
        "reward_model": {"ground_truth": "7"},
        "extra_info": {"index": 1, "mode": "gsr_refine"},
    }
    outputs = await asyncio.gather(
        *(build_loop().run(dict(sampling_params), **group_row) for _ in range(GROUP_SIZE))
    )
    planning = [c for c in server.calls if c["max_tokens"] == 16]
    sampling = [c for c in server.calls if c["max_tokens"] == RESPONSE_LENGTH]
    report["group"] = {
        "n": GROUP_SIZE,
        "server_calls": len(server.calls),
        "planning_calls": len(planning),
        "sample_calls": len(sampling),
        "prompt_ids": sorted({len(o.prompt_ids) for o in outputs}),
        "rewards": [o.reward_score for o in outputs],
        "responses": [tokenizer.decode(o.response_ids, skip_special_tokens=True) for o in outputs],
        "extra_fields": [dict(o.extra_fields) for o in outputs],
        "plans_cached_after": len(loop_class._plans),
    }
    checks["group_shares_one_plan"] = len(planning) == 2 and len(sampling) == GROUP_SIZE
    checks["group_same_prompt"] = all(o.prompt_ids == outputs[0].prompt_ids for o in outputs)
    checks["group_returns_verl_AgentLoopOutput"] = all(
        isinstance(o, verl_agent_loop.AgentLoopOutput) for o in outputs
    )
    checks["group_lengths_consistent"] = all(lengths_consistent(o) for o in outputs)
    checks["group_rewards"] = [o.reward_score for o in outputs] == [1.0] * GROUP_SIZE
    checks["group_extra_fields"] = all(
        o.extra_fields == {"ponder_mode": "gsr_refine", "ponder_step_kind": "refine"}
        for o in outputs
    )

    # 3. verl's AgentLoopWorker over a batch: a gsr_refine group with stored candidates
    #    (no planning) and a direct group, repeated n times as the trainer does.
    server.calls.clear()
    worker = verl_agent_loop.AgentLoopWorker(config, llm_client=server)
    rows: list[Mapping[str, Any]] = [
        {
            "raw_prompt": QUESTION,
            "agent_name": AGENT_NAME,
            "uid": "refine-group",
            "index": 2,
            "data_source": "check",
            "reward_model": {"ground_truth": "7"},
            "extra_info": {"index": 2, "mode": "gsr_refine", "candidates": ["6", "8"]},
        },
        {
            "raw_prompt": QUESTION,
            "agent_name": AGENT_NAME,
            "uid": "direct-group",
            "index": 3,
            "data_source": "check",
            "reward_model": {"ground_truth": "7"},
            "extra_info": {"index": 3, "mode": "direct"},
        },
    ]
    batch = DataProto(
        batch=None,
        non_tensor_batch={key: object_column([r[key] for r in rows]) for key in rows[0]},
        meta_info={"global_steps": 1},
    ).repeat(repeat_times=GROUP_SIZE, interleave=True)
    result = await worker.generate_sequences(batch)
    shapes = {key: list(value.shape) for key, value in result.batch.items()}
    size = 2 * GROUP_SIZE
    rm_scores = result.batch["rm_scores"].sum(dim=-1).tolist()
    modes = list(result.non_tensor_batch["ponder_mode"])
    report["worker"] = {
        "batch_shapes": shapes,
        "non_tensor_keys": sorted(result.non_tensor_batch),
        "rm_scores": rm_scores,
        "response_mask_sums": result.batch["response_mask"].sum(dim=-1).tolist(),
        "prompt_tokens": result.batch["attention_mask"][:, :PROMPT_LENGTH].sum(dim=-1).tolist(),
        "ponder_mode": modes,
        "server_calls": len(server.calls),
    }
    checks["worker_batch_shapes"] = (
        shapes.get("prompts") == [size, PROMPT_LENGTH]
        and shapes.get("responses") == [size, RESPONSE_LENGTH]
        and shapes.get("input_ids") == [size, PROMPT_LENGTH + RESPONSE_LENGTH]
        and shapes.get("rollout_log_probs") == [size, RESPONSE_LENGTH]
        and shapes.get("rm_scores") == [size, RESPONSE_LENGTH]
    )
    checks["worker_rewards"] = rm_scores == [1.0] * GROUP_SIZE + [0.0] * GROUP_SIZE
    checks["worker_modes"] = modes == ["gsr_refine"] * GROUP_SIZE + ["direct"] * GROUP_SIZE
    checks["worker_stored_context_not_replanned"] = len(server.calls) == size

    # 4. The same batch through a Ray actor, as AgentLoopManager runs its workers: the
    #    config, the server manager and the rows cross to another process, and the loop's
    #    answer checker starts its process pool there.
    report["ray_actor"] = await run_in_ray_actor(config, server, batch)
    checks["ray_actor_same_result"] = report["ray_actor"] == {
        "batch_shapes": shapes,
        "rm_scores": rm_scores,
        "ponder_mode": modes,
    }


async def run_in_ray_actor(config: Any, server: Any, batch: Any) -> dict[str, Any]:
    """``generate_sequences`` in a ``ray.remote(AgentLoopWorker)`` on a fresh local Ray."""
    import ray
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}},
    )
    try:
        worker = ray.remote(AgentLoopWorker).options(num_cpus=0).remote(config, server)
        result = await worker.generate_sequences.remote(batch)
    finally:
        ray.shutdown()
    return {
        "batch_shapes": {key: list(value.shape) for key, value in result.batch.items()},
        "rm_scores": result.batch["rm_scores"].sum(dim=-1).tolist(),
        "ponder_mode": list(result.non_tensor_batch["ponder_mode"]),
    }


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    started = time.monotonic()
    import torch

    torch.set_num_threads(1)
    from tests.training.tiny_model import build_tiny_model

    report: dict[str, Any] = {"checks": {}}
    try:
        with tempfile.TemporaryDirectory(prefix="ponder-verl-check-") as folder:
            work_dir = Path(folder)
            model_dir = build_tiny_model(work_dir / "tiny-qwen2")
            asyncio.run(check(model_dir, work_dir, report))
    except Exception:
        report["error"] = traceback.format_exc(limit=-6)
    finally:
        from training import verl_loop

        loop_class: Any = verl_loop._LOOP_CLASS
        if loop_class is not None and loop_class._checker is not None:
            loop_class._checker.close()
    report["seconds"] = round(time.monotonic() - started, 1)
    report["ok"] = "error" not in report and all(report["checks"].values())
    print("REPORT " + json.dumps(report, default=str), flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
