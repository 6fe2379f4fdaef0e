from symmem.cli.main import cli

raise SystemExit(cli())
