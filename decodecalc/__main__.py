from decodecalc.cli import main

main()
