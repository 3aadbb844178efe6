"""The served OpenAPI 3.1 document and the offline docs page.

The document is contract-first: each feature declares its part (``parts.DocumentPart``: its
paths, schemas from its msgspec Structs, tags) and the app hands the parts to
``document.build_document``. Tests hold the served document against real behaviour
(schemathesis), so every status, header and parameter in it is one the service answers.
"""
