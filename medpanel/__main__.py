from medpanel.experiments.cli import main

main()
