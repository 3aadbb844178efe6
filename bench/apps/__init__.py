"""Programs another process starts: the reference apps granian serves by import string, the
webhook receiver and the callgrind driver, each started by path or module name."""
