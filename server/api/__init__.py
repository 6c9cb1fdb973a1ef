"""One folder per API: each holds its request and response models (``protocol.py``), its
router (``api_router.py``) and its wire shaping (``serving.py``), and calls the shared run
path (:mod:`server.runs`). Chat completions are the run path's own request and answer
(:mod:`server.runs.request`, :mod:`server.runs.completion`): their folder holds the router.
"""
