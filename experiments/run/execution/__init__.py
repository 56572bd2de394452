"""Running a plan: the runner, its member processes, the workers, their signals and shares."""
