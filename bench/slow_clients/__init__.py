"""``make slow-clients``'s parts (its ``__main__`` runs them): slowhttptest kept at its
connection count while wrk measures, and raw-socket probes of the header and body limits."""
