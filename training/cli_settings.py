"""The settings of each ``ponder train`` subcommand, from which its options are generated.

One frozen dataclass per subcommand, composed from the trainers' own settings
(:class:`~training.common.TrainSettings`, :class:`~training.lora.LoraSettings`,
:class:`~training.grpo.GRPOSettings`, :class:`~training.rollouts.RolloutSettings`) and
:class:`ModeMix`, shared by ``grpo`` and ``verl``. Each field is an option
(:mod:`scaffolds.cli_options`): ``--field-name``, its docstring the help, its type the
parsing, its default the default; a nested part's fields are options too. A command
that trains with other defaults than the trainer's says so in its part's default
instance (``grpo``'s learning rate).

>>> args = GrpoCommand(model="m", problems=ModeMix(Path("p.jsonl")), output=Path("out"))
>>> args.train.learning_rate, args.grpo.num_generations, args.rollout.prompt_set
(1e-06, 4, 'default')
>>> from scaffolds.cli_options import field_options
>>> [o.flag for o in field_options(VerlCommand)]
['--data', '--mix', '--limit', '--out', '--prompt-set', '--num-candidates', '--mode', '--seed']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

from scaffolds.cli_options import Flag, Nested
from training.common import TrainSettings
from training.grpo import GRPOSettings
from training.lora import LoraSettings
from training.rollouts import RolloutSettings

__all__ = [
    "DataCommand",
    "GrpoCommand",
    "ModeMix",
    "SftCommand",
    "VerifierCommand",
    "VerlCommand",
]

GsrKeep = Literal["all", "all_wrong", "some_right"]
RcSummaries = Literal["next_correct", "all"]


@dataclass(frozen=True)
class DataCommand:
    """``ponder train data``: a scaffold run over a dataset, into SFT datasets."""

    run_dir: Annotated[Path, Flag(argument=True)]
    """run directory (rerun to resume)"""
    dataset: Path
    """JSONL of id/problem/answer"""
    engine: str
    """http(s)://HOST/v1, local:DIR (or hf:DIR) or vllm:DIR"""
    scaffold: Annotated[str, Flag(short="-s")] = "gsr"
    """scaffold spec"""
    model: str | None = None
    """model name an HTTP engine serves"""
    api_key: Annotated[str | None, Flag(envvar="PONDER_ENGINE_API_KEY")] = None
    """the engine's API key"""
    prompt_set: str = "default"
    """prompt set: default | compact"""
    chat: Annotated[bool | None, Flag("--chat", off="--text")] = None
    """chat messages or plain text [auto]"""
    samples: Annotated[int, Flag(min=1)] = 1
    """scaffold runs per problem"""
    limit: Annotated[int | None, Flag(min=1)] = None
    """first N problems"""
    max_tokens: Annotated[int | None, Flag(min=1)] = None
    """per engine call"""
    temperature: float | None = None
    """sampling temperature (default: the engine's)"""
    top_p: float | None = None
    """sampling top_p (default: the engine's)"""
    seed: int | None = None
    """sampling seed"""
    budget_tokens: Annotated[int | None, Flag(min=1)] = None
    """per scaffold run"""
    concurrency: Annotated[int, Flag(min=1)] = 8
    """problems in flight"""
    kinds: str | None = None
    """row kinds to build, comma-separated"""
    sft_kinds: str | None = None
    """kinds in data/sft.jsonl"""
    direct_ratio: float | None = None
    """share of direct-solve rows in the SFT mix"""
    gsr_keep: GsrKeep = "all"
    """all | all_wrong | some_right"""
    gsr_borrow: bool = False
    """a wrong refinement trains toward a right sample of its problem"""
    rc_summaries: RcSummaries = "next_correct"
    """next_correct | all"""
    min_accuracy: float = 0.5
    """abstraction notes kept at"""
    grade_workers: Annotated[int, Flag(min=1)] = 2
    """math-verify grading processes"""
    threads: int | None = None
    """torch threads (local: engine)"""
    progress: bool = True
    """show progress bars"""


@dataclass(frozen=True)
class SftCommand:
    """``ponder train sft``: supervised fine-tuning, optionally of a LoRA adapter."""

    model: str
    """base model: folder or hub name"""
    data: Path
    """JSONL rows with prompt/completion"""
    output: Annotated[Path, Flag("--out")]
    """output folder (rerun to resume)"""
    train: TrainSettings = field(default_factory=TrainSettings)
    max_length: Annotated[int, Flag(min=1)] = 2048
    """tokens per row"""
    prompt_set: str | None = None
    """recorded in final/"""
    lora: Annotated[bool, Flag("--lora")] = False
    """train LoRA adapters only"""
    adapter: Annotated[LoraSettings, Nested(prefix="lora_")] = field(default_factory=LoraSettings)
    resume: Annotated[bool, Flag("--resume", off="--restart")] = True
    """continue from the newest checkpoint"""


@dataclass(frozen=True)
class VerifierCommand:
    """``ponder train verifier``: a LoRA yes/no verifier from graded samples."""

    model: str
    """base model (the policy's): folder or hub name"""
    results: Path
    """ponder eval results.jsonl (graded samples)"""
    problems: Path
    """the problems those results answered (JSONL of id/problem/answer)"""
    output: Annotated[Path, Flag("--out")]
    """output folder (rerun to resume)"""
    held_out: Path | None = None
    """problems never to train on: a problem whose text is in this file is dropped"""
    train: TrainSettings = field(default_factory=TrainSettings)
    max_length: Annotated[int, Flag(min=1)] = 2048
    """tokens per row"""
    balance: Annotated[bool, Flag("--balance", off="--no-balance")] = True
    """as many right as wrong samples (the larger class cut, seeded)"""
    contrast: Annotated[bool, Flag("--contrast")] = False
    """only problems with both right and wrong samples, each balanced on its own (what
    tells one problem's candidates apart)"""
    adapter: Annotated[LoraSettings, Nested(prefix="lora_")] = field(default_factory=LoraSettings)
    resume: Annotated[bool, Flag("--resume", off="--restart")] = True
    """continue from the newest checkpoint"""
    process: Annotated[bool, Flag("--process")] = False
    """a process verifier: per-step labels by rollouts from each step (Math-Shepherd)"""
    engine: str | None = None
    """--process: the policy's engine for the rollouts (http(s)://HOST/v1 or local:DIR)"""
    engine_model: str | None = None
    """--process: the model name an HTTP engine serves"""
    engine_api_key: Annotated[str | None, Flag(envvar="PONDER_ENGINE_API_KEY")] = None
    """--process: the engine's API key"""
    concurrency: Annotated[int, Flag(min=1)] = 512
    """--process: rollout requests in flight at once"""
    rollouts: Annotated[int, Flag(min=1)] = 8
    """--process: completions from each step prefix (one request with n=N)"""
    soft: Annotated[bool, Flag("--soft", off="--hard")] = False
    """--process: a step's label is the fraction of rollouts that reach the answer
    (else 1 when any does)"""
    step: str = r"\n\n"
    """--process: the step separator, backslash escapes read (beam's and
    particle_filter's step)"""
    rollout_max_tokens: Annotated[int | None, Flag(min=1)] = None
    """--process: tokens per rollout (default: the engine's)"""
    temperature: float | None = None
    """--process: the rollouts' sampling temperature (default: the engine's)"""
    chat: Annotated[bool, Flag("--chat", off="--text")] = True
    """--process: rollouts continue a chat's assistant message (else a text prompt)"""


@dataclass(frozen=True)
class ModeMix:
    """Problems, and the scaffold-step modes dealt out to them by weight."""

    data: Path
    """JSONL problems (id/problem/answer[/mode/...])"""
    mix: str = "direct"
    """modes by weight, e.g. direct=1,gsr_refine=1"""
    limit: Annotated[int | None, Flag(min=1)] = None
    """first N problems"""

    def rows(self, *, seed: int, chat: bool = False) -> list[dict[str, Any]]:
        """GRPO rows (:func:`training.grpo.grpo_rows`) of the first ``limit`` problems."""
        from training.collect import read_problems
        from training.grpo import grpo_rows, parse_mix

        problems = [p.row() for p in read_problems(self.data, limit=self.limit)]
        return grpo_rows(problems, parse_mix(self.mix), seed=seed, chat=chat)


@dataclass(frozen=True)
class GrpoCommand:
    """``ponder train grpo``: GRPO where each group samples one scaffold step."""

    model: str
    """policy: folder or hub name"""
    problems: ModeMix
    output: Annotated[Path, Flag("--out")]
    """output folder (rerun to resume)"""
    rollout: Annotated[RolloutSettings, Nested(exclude=("default_mode",))] = field(
        default_factory=RolloutSettings
    )
    chat: Annotated[bool, Flag("--chat", off="--text")] = False
    """prompts as chat messages"""
    grpo: GRPOSettings = field(default_factory=GRPOSettings)
    reward: Annotated[tuple[str, ...] | None, Flag(repeat=True)] = None
    """correctness | boxed | rubric (repeatable; default: correctness)"""
    judge_url: str | None = None
    """rubric judge base URL"""
    judge_model: str | None = None
    """the rubric judge's model name"""
    judge_api_key: Annotated[str | None, Flag(envvar="PONDER_JUDGE_API_KEY")] = None
    """the rubric judge's API key"""
    rubric: Path | None = None
    """rubric text file"""
    train: Annotated[TrainSettings, Nested(exclude=("warmup",))] = field(
        default_factory=partial(TrainSettings, learning_rate=1e-6, save_steps=100, logging_steps=1)
    )


@dataclass(frozen=True)
class VerlCommand:
    """``ponder train verl``: verl's dataset and agent-loop config for the scaffold rollout."""

    problems: ModeMix
    output: Annotated[Path, Flag("--out")]
    """folder for the parquet and YAML"""
    rollout: Annotated[
        RolloutSettings, Nested(exclude=("context_max_tokens", "summary_max_tokens"))
    ] = field(default_factory=RolloutSettings)
    seed: int = 0
    """random seed (which modes problems get)"""
