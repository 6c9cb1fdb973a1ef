"""Templates shared by several scaffolds: plain solving and the forced final answer.

The forced answer follows MRT: when a budget cuts a step short, a short "time is up"
cue asks for the final answer at once, so a cut never leaves a run without an answer.
"""

from scaffolds.prompts.sets import PromptSet
from scaffolds.prompts.template import Template

SOLVE = Template(
    "solve",
    "$problem\n\nReason step by step, and put your final answer within \\boxed{}.",
)

FORCE_ANSWER = Template(
    "force_answer",
    "\n\nTime is up. Stop reasoning here and state the final answer right now, as \\boxed{...}.\n",
)

FORCE_ANSWER_THINK = Template(
    "force_answer_think",
    "\n\nTime is up, so I stop thinking here and give my final answer.\n",
)
"""A thinking model cut mid-thought: this cue goes inside its thinking, just before the
model's end-of-thinking marker, and the model writes its answer after the marker."""

EMPTY_STEP = "(this step wrote nothing)"
"""What a prompt carries in place of a helper step that wrote nothing at all."""

CANDIDATE = Template("candidate", "#### Candidate $index\n$text")
CANDIDATE_SEPARATOR = "\n\n"

COMPACT_SOLVE = Template("solve", "$problem")
COMPACT_FORCE_ANSWER = Template("force_answer", "=")
COMPACT_FORCE_ANSWER_THINK = Template("force_answer_think", "")
COMPACT_EMPTY_STEP = "?"
COMPACT_CANDIDATE = Template("candidate", "$text")
COMPACT_CANDIDATE_SEPARATOR = ","

SETS = (
    PromptSet.of(
        "default",
        SOLVE,
        FORCE_ANSWER,
        FORCE_ANSWER_THINK,
        CANDIDATE,
        candidate_separator=CANDIDATE_SEPARATOR,
        empty_step=EMPTY_STEP,
    ),
    PromptSet.of(
        "compact",
        COMPACT_SOLVE,
        COMPACT_FORCE_ANSWER,
        COMPACT_FORCE_ANSWER_THINK,
        COMPACT_CANDIDATE,
        candidate_separator=COMPACT_CANDIDATE_SEPARATOR,
        empty_step=COMPACT_EMPTY_STEP,
    ),
)
"""The shared templates of every prompt set: these name the sets that exist."""
