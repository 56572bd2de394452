"""Free-text benchmark files read offline: rubric task files (HealthBench's layout and the packaged
sample set, `tasks.py`), MedRBench's case files (`medrbench.py`), a file or a folder of them (`files.py`).
The run room reads them as questions and a method's grader as grading keys."""
