"""Drive :class:`InProcessVLLMEngine` on a model and print what happened, as JSON.

Runs INSIDE the vLLM venv (``PYTHONPATH=. .venv-vllm/bin/python -m
tests.scaffolds.engines.inprocess_vllm_check MODEL_DIR``): vLLM never enters Ponder's own
environment, so the pytest side (``test_vllm_inprocess.py``) starts this as a child
process and checks the report. The model is tiny and random: the report holds structure
(counts, ids, finish reasons, usage), never text quality.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from scaffolds import RunSettings, solve
from scaffolds.engines.messages import chat
from scaffolds.engines.protocol import GenerateRequest, GenerateResult, SamplingParams
from scaffolds.engines.vllm_inprocess import InProcessVLLMEngine


async def _checks(model_dir: str) -> dict[str, Any]:
    engine = InProcessVLLMEngine(
        model_dir, engine_args={"max_model_len": 2048, "dtype": "bfloat16", "seed": 0}
    )
    report: dict[str, Any] = {}
    try:
        sampled = SamplingParams(n=3, max_tokens=12, temperature=1.0, seed=7, logprobs=True)
        question = chat("What is 2+3? " + "Think it over step by step, then answer. " * 8)
        first = await engine.generate(GenerateRequest(question, sampled))
        again = await engine.generate(GenerateRequest(question, sampled))
        report["n_samples"] = len(first.completions)
        report["usage"] = first.usage.to_dict()
        report["second_cached_tokens"] = again.usage.cached_tokens
        report["token_counts"] = [len(c.token_ids or ()) for c in first.completions]
        report["logprob_counts"] = [len(c.logprobs or ()) for c in first.completions]
        report["completion_tokens"] = [c.completion_tokens for c in first.completions]
        report["finish_reasons"] = [c.finish_reason for c in first.completions]
        report["ended_at_eos"] = [c.ended_at_eos for c in first.completions]
        report["stop_matched"] = [c.stop_matched for c in first.completions]
        eos_id = json.loads((Path(model_dir) / "config.json").read_text())["eos_token_id"]
        report["last_is_eos"] = [(c.token_ids or ())[-1:] == (eos_id,) for c in first.completions]
        stops = ("e", "a", " ")
        with_stops = SamplingParams(
            n=4,
            max_tokens=8,
            temperature=1.0,
            seed=5,
            stop=stops,
            extra={"include_stop_str_in_output": True},
        )
        cut = await engine.generate(GenerateRequest(chat("Spell it"), with_stops))
        report["stop_cases"] = [
            [c.finish_reason, c.text.endswith(stops), c.stop_matched, c.ended_at_eos]
            for c in cut.completions
        ]
        forced = SamplingParams(max_tokens=8, stop=stops, extra={"logit_bias": {eos_id: 100.0}})
        [ended] = (await engine.generate(GenerateRequest(chat("Spell it"), forced))).completions
        report["forced_eos"] = [ended.text, ended.finish_reason, ended.stop_matched]
        report["forced_eos"].append(ended.ended_at_eos)
        report["prompt_ids"] = len(first.prompt_token_ids or ())
        report["seeded_repeat_equal"] = [c.token_ids for c in first.completions] == [
            c.token_ids for c in again.completions
        ]

        plain = await engine.generate(
            GenerateRequest("Once upon", SamplingParams(max_tokens=5, temperature=0, logprobs=True))
        )
        report["plain_finish"] = plain.completions[0].finish_reason
        report["plain_tokens"] = plain.completions[0].completion_tokens
        report["plain_last_is_eos"] = (plain.completions[0].token_ids or ())[-1:] == (eos_id,)

        streamed_text = ""
        final: GenerateResult | None = None
        async for item in engine.stream(
            GenerateRequest(chat("Count"), SamplingParams(max_tokens=8, temperature=0))
        ):
            if isinstance(item, GenerateResult):
                final = item
            else:
                streamed_text += item.text
        assert final is not None
        report["stream_matches_result"] = streamed_text == final.completions[0].text
        report["stream_tokens"] = final.usage.completion_tokens

        # Cancelled once its first tokens are out, so it is surely inside vLLM (a cancel
        # while vLLM is still adding the request would leave nothing for it to abort).
        writing = asyncio.Event()
        going_on = GenerateRequest(
            chat("Go on"),
            SamplingParams(max_tokens=1500, temperature=1.0, extra={"ignore_eos": True}),
        )

        async def consume() -> None:
            async for _ in engine.stream(going_on):
                writing.set()

        long_call = asyncio.create_task(consume())
        await asyncio.wait_for(writing.wait(), 600)
        long_call.cancel()
        try:
            await long_call
            report["cancelled"] = False
        except asyncio.CancelledError:
            report["cancelled"] = True
        await asyncio.sleep(0.5)
        processor = engine._llm.output_processor  # vLLM's own count
        report["unfinished_after_cancel"] = int(processor.get_num_unfinished_requests())
        del processor

        top = await engine.generate(
            GenerateRequest(chat("Count"), SamplingParams(n=2, max_tokens=6, top_logprobs=3))
        )
        report["top_counts"] = [len(c.top_logprobs or ()) for c in top.completions]
        report["top_tokens"] = [c.completion_tokens for c in top.completions]
        positions = [t for c in top.completions for t in c.top_logprobs or ()]
        report["top_widths"] = sorted({len(t) for t in positions})
        report["top_sorted"] = all(list(t) == sorted(t, reverse=True) for t in positions)
        report["top_logprobs_alone"] = [c.logprobs for c in top.completions] == [None, None]

        forced = await solve(
            "budget_forcing(min_tokens=100000, waits=1)",
            "What is 2+3?",
            engine,
            RunSettings(params=SamplingParams(max_tokens=8, temperature=1.0, stop=("e", "a", " "))),
        )
        report["forcing_kinds"] = [
            e.kind for e in forced.events if getattr(e, "type", "") == "step_started"
        ]
        report["forcing_finishes"] = [
            e.finish_reasons[0] for e in forced.events if getattr(e, "type", "") == "step_finished"
        ]

        run = await solve(
            "majority(k=4)",
            "What is 2+3?",
            engine,
            RunSettings(params=SamplingParams(max_tokens=8, temperature=1.0)),
        )
        report["majority_calls"] = run.usage.calls
        report["majority_completion_tokens"] = run.usage.completion_tokens
    finally:
        await engine.aclose()
    return report


if __name__ == "__main__":
    print("REPORT " + json.dumps(asyncio.run(_checks(sys.argv[1]))), flush=True)
