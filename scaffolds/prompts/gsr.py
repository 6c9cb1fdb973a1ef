"""GSR, generative self-refinement (arXiv 2509.00084): refine N candidates into one."""

from scaffolds.prompts.sets import PromptSet
from scaffolds.prompts.template import Template

REFINE = Template(
    "gsr_refine",
    "### Problem\n$problem\n\n"
    "### Candidate solutions\n$candidates\n\n"
    "### Instructions\n"
    "Above are $count candidate solutions to the problem, written independently; any "
    "of them may be wrong. Compare them and check their reasoning, then write one "
    "complete solution that is better than each of them: keep what is right and repair "
    "what is wrong. If none of them is right, solve the problem yourself from scratch. "
    "Reason step by step, and end with your final answer within \\boxed{}.",
)

COMPACT_REFINE = Template("gsr_refine", "$problem[$candidates]")

SETS = (PromptSet.of("default", REFINE), PromptSet.of("compact", COMPACT_REFINE))
