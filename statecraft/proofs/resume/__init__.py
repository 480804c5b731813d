"""Crash proofs of the resume capability: its scenarios (what is on disk before, how the transaction
runs, what a restarted process does) and the checks that judge every crash state."""
