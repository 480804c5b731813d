"""The commit kernel: what every capability builds on, and nothing above it.

The layout and RUN_TS (``layout``), the plan model (``plan``, ``components``), the commit
records and their codecs (``manifest``, ``artifact_manifest``, ``schemas``), verification
(``verify``, ``artifact_verify``), the one reading of what is on disk (``catalog``,
``artifact_catalog``) with the markers every reader must understand (``retention_records``,
``retention_marks``, ``validation_records``, ``artifact_release``), loading a verified
checkpoint into live objects all or nothing (``loading``, ``compatibility``), the loop's
evaluation callable (``evaluation``) and the shipped transactions (``machines``).

Imports only ``checkpoint.state`` inside the domain; every capability imports it.
"""
