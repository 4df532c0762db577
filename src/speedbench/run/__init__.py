"""Running a sweep: the grid runner, one measured level, the prompt plan and the launch plan.

``sweep`` walks the grid (SD config x split x load point) over a started engine, ``level``
measures one point and writes its records and metrics as they arrive, ``plan`` picks each
level's prompts, and ``dryrun`` prints every engine command line and request body of a sweep
without starting anything (``speedbench plan``).
"""
