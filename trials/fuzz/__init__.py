"""``make fuzz``'s parts (its ``__main__`` runs them): schemathesis rounds against a real server
per backend, the atheris harnesses of trials/fuzz/harnesses/, and the summary with the volume targets."""
