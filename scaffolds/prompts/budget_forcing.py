"""Budget forcing (s1, arXiv 2501.19393): the cue that reopens a message that ended early.

When the model stops before its minimum, its end of reasoning (``</think>`` and what
follows) is dropped, this cue is appended, and the model continues the same message.
"""

from scaffolds.prompts.sets import PromptSet
from scaffolds.prompts.template import Template

WAIT = Template("budget_forcing_wait", "\n\nWait")

COMPACT_WAIT = Template("budget_forcing_wait", " wait")  # the compact vocabulary is lowercase

SETS = (PromptSet.of("default", WAIT), PromptSet.of("compact", COMPACT_WAIT))
