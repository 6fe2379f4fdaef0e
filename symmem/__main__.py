from symmem.cli.main import program

program()
