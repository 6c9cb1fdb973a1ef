"""The operations routes: version, liveness, readiness and metrics."""
