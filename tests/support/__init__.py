"""Reusable process helpers for the test suite (real servers, stopped by pid)."""
