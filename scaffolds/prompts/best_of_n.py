"""Best-of-N with an LLM judge: pick the candidate most likely to be right."""

from scaffolds.prompts.sets import PromptSet
from scaffolds.prompts.template import Template

JUDGE = Template(
    "best_of_n_judge",
    "### Problem\n$problem\n\n"
    "### Candidate solutions\n$candidates\n\n"
    "### Instructions\n"
    "Decide which of the $count candidate solutions above is most likely correct. Check "
    "each one's reasoning and final answer. End with the number of the best candidate "
    "within \\boxed{}, for example \\boxed{2}.",
)

COMPACT_JUDGE = Template("best_of_n_judge", "$problem[$candidates]!")

SETS = (PromptSet.of("default", JUDGE), PromptSet.of("compact", COMPACT_JUDGE))
