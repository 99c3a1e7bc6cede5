"""Evaluation: the tool world with the real environment (success, checklist reward, rehearsal fidelity)
and the external benchmarks, optionally with test-time rehearsal."""
