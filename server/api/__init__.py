"""One folder per API: each holds its request and response models (``protocol.py``), its
router (``api_router.py``) and its wire shaping (``serving.py``), and calls the shared run
path (:mod:`server.runs`).
"""
