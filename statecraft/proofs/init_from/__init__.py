"""The deliberately wrong start policies of ``init_from`` (:mod:`.broken`): each reproduces a bug
the reference contract records, so a test can show it changes the objective and that the
shipped policy (:mod:`statecraft.checkpoint.init_from.start`) does not."""
