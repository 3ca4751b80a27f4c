from adrun.cli import main

main()
