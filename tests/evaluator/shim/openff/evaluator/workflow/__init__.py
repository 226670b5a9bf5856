"""Only what openff-evaluator's backend tests import from its workflows (see plugins)."""
