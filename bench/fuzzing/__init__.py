"""``make fuzz``'s parts (bench/fuzz.py runs them): schemathesis rounds against a real server
per backend, the atheris harnesses of bench/fuzz/, and the summary with the volume targets."""
