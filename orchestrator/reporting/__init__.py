"""Reporting: diagnoses, run reports, text rendering and structured logs."""
