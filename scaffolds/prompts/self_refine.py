"""Self-Refine (arXiv 2303.17651): feedback on a solution, then a refinement."""

from scaffolds.prompts.sets import PromptSet
from scaffolds.prompts.template import Template

FEEDBACK = Template(
    "self_refine_feedback",
    "### Problem\n$problem\n\n"
    "### Proposed solution\n$solution\n\n"
    "### Instructions\n"
    "Check the proposed solution step by step. For each step, say whether it is "
    "correct, and explain any error precisely. Do not write a new solution. End with "
    "one line that reads exactly `VERDICT: CORRECT` if the whole solution and its final "
    "answer are right, or `VERDICT: INCORRECT` otherwise.",
)

REFINE = Template(
    "self_refine_refine",
    "### Problem\n$problem\n\n"
    "### Previous solution\n$solution\n\n"
    "### Feedback on it\n$feedback\n\n"
    "### Instructions\n"
    "Write a new, complete solution that fixes every problem the feedback points out. "
    "Reason step by step, and end with your final answer within \\boxed{}.",
)

CORRECT_MARKER = "VERDICT: CORRECT"

COMPACT_FEEDBACK = Template("self_refine_feedback", "$problem$solution?")
COMPACT_REFINE = Template("self_refine_refine", "$problem$solution?$feedback>")
COMPACT_CORRECT_MARKER = "ok"

SETS = (
    PromptSet.of("default", FEEDBACK, REFINE, self_refine_correct_marker=CORRECT_MARKER),
    PromptSet.of(
        "compact",
        COMPACT_FEEDBACK,
        COMPACT_REFINE,
        self_refine_correct_marker=COMPACT_CORRECT_MARKER,
    ),
)
