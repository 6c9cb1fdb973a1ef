"""What the server says about itself: Prometheus metrics and structured logs."""
