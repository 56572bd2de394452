"""multiagent: MedAgents, MDAgents and KAMAC as the variants of one pipeline
(`pipeline.py`); their shared talk and tally stay in agents/pipelines/multiagent_*.py."""
