"""Child processes the project owns (:mod:`~scaffolds.processes.children`): each in a
process group of its own, stopped as a group, dead when its parent dies
(:mod:`~scaffolds.processes.group_guard`).
"""
