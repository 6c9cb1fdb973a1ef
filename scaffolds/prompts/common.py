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

CANDIDATE = Template("candidate", "#### Candidate $index\n$text")
CANDIDATE_SEPARATOR = "\n\n"

COMPACT_SOLVE = Template("solve", "$problem")
COMPACT_FORCE_ANSWER = Template("force_answer", "=")
COMPACT_CANDIDATE = Template("candidate", "$text")
COMPACT_CANDIDATE_SEPARATOR = ","

SETS = (
    PromptSet.of(
        "default", SOLVE, FORCE_ANSWER, CANDIDATE, candidate_separator=CANDIDATE_SEPARATOR
    ),
    PromptSet.of(
        "compact",
        COMPACT_SOLVE,
        COMPACT_FORCE_ANSWER,
        COMPACT_CANDIDATE,
        candidate_separator=COMPACT_CANDIDATE_SEPARATOR,
    ),
)
"""The shared templates of every prompt set: these name the sets that exist."""
