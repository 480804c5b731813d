"""Crash scenarios, checks and broken variants of the ``roles_boundary`` machine."""
