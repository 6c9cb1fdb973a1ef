"""The model pool: each served model's settings, its engine (replicas behind one engine,
circuit breakers, metering) and the embedded default models.
"""
