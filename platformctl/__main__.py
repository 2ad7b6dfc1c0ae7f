from platformctl.cli import main

main()
