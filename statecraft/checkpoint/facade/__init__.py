"""The facade a training loop talks to: :class:`~.checkpointer.Checkpointer` and the modules it
hands each call to (opening the attempt, the step boundary, the stop, resume, validation around
resume). The only package that imports every capability."""
