"""Named prompt templates with checked fields.

Templates use ``$field`` placeholders (``string.Template``), so LaTeX braces such as
``\\boxed{}`` need no escaping. A step offers its fields by name; a template uses any
subset of them (so the compact set can leave out what a tiny model does not need),
and rendering fails if a field the template uses is not offered.

>>> t = Template("greet", "Hello $name.")
>>> t.fields
frozenset({'name'})
>>> t.render(name="Ada")
'Hello Ada.'
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Template:
    name: str
    text: str
    fields: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        parsed = string.Template(self.text)
        if not parsed.is_valid():
            raise ValueError(f"template {self.name!r} has a malformed placeholder")
        object.__setattr__(self, "fields", frozenset(parsed.get_identifiers()))

    def render(self, **values: str) -> str:
        if missing := self.fields - set(values):
            raise ValueError(f"template {self.name!r} is missing fields {sorted(missing)}")
        return string.Template(self.text).substitute(values)
