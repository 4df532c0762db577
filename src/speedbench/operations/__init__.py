"""Operations: the servers a team runs beside its sweeps (shared tracking and orchestration).

Nothing here measures, and nothing that measures imports it: only the command line
(``speedbench stores``) and the list of expected errors do.
"""
