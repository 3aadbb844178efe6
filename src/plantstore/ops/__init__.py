"""Running the service in the open: the observing layer (request ids, metrics, the access
log), Prometheus metrics and their listener, structured logs, and the health routes."""
