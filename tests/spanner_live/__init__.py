"""The live suite: agentq's Spanner suites against a real instance (see ``__main__``)."""
