"""A hub-compatible HTTP endpoint for tests (``HF_ENDPOINT``): see :mod:`tests.hub.server`."""
