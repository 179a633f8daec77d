from bottler.cli import main

main()
