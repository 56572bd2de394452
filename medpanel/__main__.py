"""`python -m medpanel`: the command line, as the `medpanel` script runs it."""

from medpanel.experiments.cli.main import entry

entry()
