"""Abstraction-then-solve (RLAD, arXiv 2510.02263): short general hints, then solve."""

from scaffolds.prompts.sets import PromptSet
from scaffolds.prompts.template import Template

PROPOSE = Template(
    "abstraction_propose",
    "### Problem\n$problem\n\n"
    "### Instructions\n"
    "Do not solve this problem. Write one short note that would help someone solve "
    "problems of this kind: name a useful technique, fact or common pitfall, describe "
    "it in general terms, and illustrate it with a small example of your own. Use none "
    "of this problem's own numbers or objects. Keep the note under 150 words.",
)

SOLVE = Template(
    "abstraction_solve",
    "### Cheat sheet\n$abstraction\n\n"
    "### Problem\n$problem\n\n"
    "### Instructions\n"
    "The cheat sheet describes a general idea that may help; use it where it applies. "
    "Reason step by step, and end with your final answer within \\boxed{}.",
)

COMPACT_PROPOSE = Template("abstraction_propose", "$problem@")
COMPACT_SOLVE = Template("abstraction_solve", "$abstraction;$problem")

SETS = (
    PromptSet.of("default", PROPOSE, SOLVE),
    PromptSet.of("compact", COMPACT_PROPOSE, COMPACT_SOLVE),
)
