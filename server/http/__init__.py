"""The HTTP edge: the FastAPI app, its routes (the fast path and the API router), the
OpenAI wire format, auth, limits, errors in the OpenAI shape, logs, metrics and the
playground page.
"""
