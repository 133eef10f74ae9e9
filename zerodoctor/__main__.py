from zerodoctor.cli import main

main()
