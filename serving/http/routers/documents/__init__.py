"""The documents family: what a citation opens (a cited section) and a policy resolved by its id, for
a verified caller who may read them now (serving/services/documents.py)."""
