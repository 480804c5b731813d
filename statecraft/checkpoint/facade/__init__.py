"""The facade a training loop talks to: :class:`~.checkpointer.Checkpointer` and the modules it
hands each call to (opening the attempt, the step boundary, the stop, resume, validation around
resume). The only package that imports every capability.

The ``Checkpointer`` holds one run as two records, and its helpers take those (and the
capability objects they need: the boundary runner, the step saver), never the ``Checkpointer``:
:class:`~.run_context.RunContext` (frozen; with :class:`~.run_context.OpenAttempt` once the
attempt is open) and :class:`~.run_state.RunState` (what changes across steps). The imports
run one way (no cycle: ``tests/test_architecture.py``): the two records first, then
``attempt_open``, ``step_saver``, ``boundary_run``, ``boundary_step``, ``emergency_step``,
``stopping``, ``resume_run``, and ``checkpointer`` last."""
