"""The app and its middleware: the FastAPI application built from the APIs' routers,
request ids and logs, Bearer auth, the body limit, the completion routes served without
FastAPI's routing, the OpenAPI document, /docs, the playground page, and uvicorn's
listener and one-write protocol.
"""
