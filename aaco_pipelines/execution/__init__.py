"""Running a model in isolation: the worker process, its parent-side runner, laboratory mode."""
