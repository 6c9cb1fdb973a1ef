"""Serving: one HTTP request planned into one scaffold run (:mod:`~server.serving.planning`),
run by :class:`~server.serving.handler.Serving`, and shaped as an OpenAI response or SSE
stream (:mod:`~server.serving.responses`, :mod:`~server.serving.streaming`).
"""
