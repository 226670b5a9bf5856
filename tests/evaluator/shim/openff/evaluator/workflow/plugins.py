"""``openff.evaluator.workflow.plugins.registered_workflow_protocols``: openff-evaluator's
registry of workflow protocols. hybrid has no workflows, so it is empty; test_dask.py
imports it, and only its not-applicable ``test_lsf_wrapped_function`` reads it."""

registered_workflow_protocols: dict = {}
