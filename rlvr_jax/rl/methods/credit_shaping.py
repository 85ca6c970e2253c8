"""Registrations: see the package docstring."""
