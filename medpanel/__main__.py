from medpanel.experiments.cli.main import entry

entry()
