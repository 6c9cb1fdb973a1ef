"""OpenAI's Responses API: create, retrieve, delete and input items, the stored
conversations, and the engine's own ``/v1/responses``.
"""
