from medpanel.experiments.cli.main import main

main()
