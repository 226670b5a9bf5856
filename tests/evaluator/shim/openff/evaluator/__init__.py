"""A shim, not openff-evaluator: ``openff.evaluator.backends`` is hybrid's backends.

It lets openff-evaluator's own backend tests (tests/evaluator/upstream, unchanged) import
what they import, as a user switching to hybrid changes an import. Each module below maps
one module of ``openff.evaluator.backends`` to hybrid's; nothing else of openff-evaluator
is here.
"""
