"""JWT access tokens from the team's identity provider: its keys (``jwks``), what makes a
token acceptable (``verifier``), and the caller it names (``callers``). Loaded only where a
provider is configured."""
