"""The run's store: its directory's files and the study's rows, written and read back."""
